//! Where the command line finds its server: the `--url`, `--token`, `--client-id`,
//! `--client-secret`, `--scope`, `--protocol` and `--profile` flags, the `TASKMESH_URL`,
//! `TASKMESH_TOKEN`, `TASKMESH_CLIENT_ID`, `TASKMESH_CLIENT_SECRET`, `TASKMESH_SCOPE`,
//! `TASKMESH_PROTOCOL` and `TASKMESH_PROFILE` environment variables, and a profile file, in
//! that order of precedence, each setting on its own.
//!
//! The profile file is TOML (`$TASKMESH_PROFILES`, else
//! `$XDG_CONFIG_HOME/taskmesh/profiles.toml`, else `~/.config/taskmesh/profiles.toml`):
//!
//! ```toml
//! default = "local"
//!
//! [profiles.local]
//! url = "http://127.0.0.1:8080/mcp"
//!
//! [profiles.prod]
//! url = "https://mcp.example.com/mcp"
//! token = "..."
//! protocol = "2025-11-25"
//! ```
//!
//! The profile used is the one `--profile` or `TASKMESH_PROFILE` names (it must exist), else
//! the file's `default` (when the file has one). Resolution is a pure function of the flags,
//! the environment and the file's text ([`resolve`]), so it is tested without either.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Which protocol generation to speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Protocol {
    /// 2025-11-25 when the server answers `initialize` (live progress, `tasks/list`), else
    /// 2026-07-28.
    #[default]
    Auto,
    /// A session, opened with `initialize`.
    #[value(name = "2025-11-25")]
    V2025,
    /// The stateless generation with the tasks extension, found with `server/discover`.
    #[value(name = "2026-07-28")]
    V2026,
}

impl Protocol {
    fn parse(s: &str) -> Option<Protocol> {
        match s {
            "auto" => Some(Protocol::Auto),
            "2025-11-25" => Some(Protocol::V2025),
            "2026-07-28" => Some(Protocol::V2026),
            _ => None,
        }
    }
}

/// The connection flags every client command takes.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ConnFlags {
    /// The server's MCP endpoint (also TASKMESH_URL, or a profile's `url`).
    #[arg(long, global = true)]
    pub url: Option<String>,
    /// Bearer token sent as `Authorization: Bearer` (also TASKMESH_TOKEN, or a profile's
    /// `token`).
    #[arg(long, global = true)]
    pub token: Option<String>,
    /// OAuth client id: get access tokens by client credentials from the server's
    /// authorization server, found from its metadata (also TASKMESH_CLIENT_ID, or a profile's
    /// `client_id`). In place of --token.
    #[arg(long, global = true)]
    pub client_id: Option<String>,
    /// The OAuth client's secret (also TASKMESH_CLIENT_SECRET, or a profile's
    /// `client_secret`).
    #[arg(long, global = true)]
    pub client_secret: Option<String>,
    /// The scopes to ask tokens for, space-separated (also TASKMESH_SCOPE, or a profile's
    /// `scope`; default: the authorization server's).
    #[arg(long, global = true)]
    pub scope: Option<String>,
    /// A profile of the profile file (also TASKMESH_PROFILE; else the file's `default`).
    #[arg(long, global = true)]
    pub profile: Option<String>,
    /// The protocol generation (also TASKMESH_PROTOCOL, or a profile's `protocol`).
    #[arg(long, global = true, value_enum)]
    pub protocol: Option<Protocol>,
}

/// What a command connects with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The MCP endpoint.
    pub url: String,
    /// The bearer token, if any.
    pub token: Option<String>,
    /// OAuth client credentials to get tokens with, if any (then no `token`).
    pub oauth: Option<taskmesh_client::oauth::ClientCredentials>,
    /// The protocol generation.
    pub protocol: Protocol,
    /// The profile the settings came from in part, if any.
    pub profile: Option<String>,
}

/// The profile file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileFile {
    default: Option<String>,
    #[serde(default)]
    profiles: BTreeMap<String, Profile>,
}

/// One `[profiles.NAME]` section.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Profile {
    url: Option<String>,
    token: Option<String>,
    client_id: Option<String>,
    client_secret: Option<String>,
    scope: Option<String>,
    protocol: Option<String>,
}

/// Why the settings could not be made.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SettingsError {
    /// No URL anywhere.
    #[error(
        "no server URL: give --url URL, set TASKMESH_URL, or add a profile with a `url` to {0} \
         (and select it with --profile NAME or `default = \"NAME\"`)"
    )]
    NoUrl(String),
    /// The profile file is not valid.
    #[error("the profile file {path} is not valid: {why}")]
    BadFile {
        /// The file.
        path: String,
        /// What is wrong.
        why: String,
    },
    /// A named profile is not in the file.
    #[error("no profile {name:?} in {path}")]
    NoProfile {
        /// The profile asked for.
        name: String,
        /// The file.
        path: String,
    },
    /// A client id without its secret, or both a token and a client id.
    #[error("{0}")]
    BadCredentials(String),
    /// A protocol that is not one the command line speaks.
    #[error("{from}: {value:?} is not a protocol (auto, 2025-11-25 or 2026-07-28)")]
    BadProtocol {
        /// Where it was given.
        from: String,
        /// What was given.
        value: String,
    },
}

/// The profile file's path: `TASKMESH_PROFILES`, else under `XDG_CONFIG_HOME`, else under
/// `HOME/.config`.
pub fn profile_path(env: &impl Fn(&str) -> Option<String>) -> PathBuf {
    if let Some(p) = env("TASKMESH_PROFILES").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let config = env("XDG_CONFIG_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(&env("HOME").unwrap_or_default()).join(".config"));
    config.join("taskmesh").join("profiles.toml")
}

/// The settings from `flags`, the environment `env`, and the profile file at `path` whose
/// text is `file` (`None` when there is no such file).
pub fn resolve(
    flags: &ConnFlags,
    env: &impl Fn(&str) -> Option<String>,
    path: &Path,
    file: Option<&str>,
) -> Result<Settings, SettingsError> {
    let shown = path.display().to_string();
    let parsed: ProfileFile = match file {
        Some(text) => toml::from_str(text).map_err(|e| SettingsError::BadFile {
            path: shown.clone(),
            why: e.message().to_string(),
        })?,
        None => ProfileFile::default(),
    };
    let env = |k: &str| env(k).filter(|v| !v.is_empty());
    let wanted = flags.profile.clone().or_else(|| env("TASKMESH_PROFILE"));
    let (name, profile) = match wanted {
        Some(name) => match parsed.profiles.get(&name) {
            Some(p) => (Some(name), p.clone()),
            None => {
                return Err(SettingsError::NoProfile { name, path: shown });
            }
        },
        None => match parsed.default {
            Some(name) => match parsed.profiles.get(&name) {
                Some(p) => (Some(name), p.clone()),
                None => return Err(SettingsError::NoProfile { name, path: shown }),
            },
            None => (None, Profile::default()),
        },
    };
    let url = flags
        .url
        .clone()
        .or_else(|| env("TASKMESH_URL"))
        .or(profile.url)
        .ok_or_else(|| SettingsError::NoUrl(shown.clone()))?;
    let token = flags
        .token
        .clone()
        .or_else(|| env("TASKMESH_TOKEN"))
        .or(profile.token);
    let client_id = flags
        .client_id
        .clone()
        .or_else(|| env("TASKMESH_CLIENT_ID"))
        .or(profile.client_id);
    let client_secret = flags
        .client_secret
        .clone()
        .or_else(|| env("TASKMESH_CLIENT_SECRET"))
        .or(profile.client_secret);
    let scope = flags
        .scope
        .clone()
        .or_else(|| env("TASKMESH_SCOPE"))
        .or(profile.scope);
    let oauth =
        match (client_id, client_secret) {
            (None, None) => None,
            (Some(client_id), Some(client_secret)) => {
                Some(taskmesh_client::oauth::ClientCredentials {
                    client_id,
                    client_secret,
                    scope,
                    token_endpoint: None,
                })
            }
            (Some(_), None) => return Err(SettingsError::BadCredentials(
                "a client id needs its secret: give --client-secret, set TASKMESH_CLIENT_SECRET, \
                 or add `client_secret` to the profile"
                    .into(),
            )),
            (None, Some(_)) => return Err(SettingsError::BadCredentials(
                "a client secret needs its client id: give --client-id, set TASKMESH_CLIENT_ID, \
                 or add `client_id` to the profile"
                    .into(),
            )),
        };
    if token.is_some() && oauth.is_some() {
        return Err(SettingsError::BadCredentials(
            "both a token and OAuth client credentials: give one of them".into(),
        ));
    }
    let protocol = match flags.protocol {
        Some(p) => p,
        None => {
            let (from, value) = match env("TASKMESH_PROTOCOL") {
                Some(v) => ("TASKMESH_PROTOCOL".to_string(), Some(v)),
                None => (
                    format!("the protocol of profile {name:?}"),
                    profile.protocol,
                ),
            };
            match value {
                Some(v) => {
                    Protocol::parse(&v).ok_or(SettingsError::BadProtocol { from, value: v })?
                }
                None => Protocol::Auto,
            }
        }
    };
    Ok(Settings {
        url,
        token,
        oauth,
        protocol,
        profile: name,
    })
}

/// The settings of this process: its flags, its environment, and the profile file when there
/// is one.
pub fn load(flags: &ConnFlags) -> Result<Settings, SettingsError> {
    let env = |k: &str| std::env::var(k).ok();
    let path = profile_path(&env);
    let file = match std::fs::read_to_string(&path) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            return Err(SettingsError::BadFile {
                path: path.display().to_string(),
                why: e.to_string(),
            })
        }
    };
    resolve(flags, &env, &path, file.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
default = "home"
[profiles.home]
url = "http://home/mcp"
token = "home-token"
[profiles.office]
url = "http://office.example/mcp"
protocol = "2026-07-28"
"#;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k: &str| m.get(k).cloned()
    }

    fn flags(url: Option<&str>, profile: Option<&str>) -> ConnFlags {
        ConnFlags {
            url: url.map(str::to_string),
            profile: profile.map(str::to_string),
            ..ConnFlags::default()
        }
    }

    #[test]
    fn a_flag_beats_the_environment_which_beats_the_profile() {
        let p = Path::new("profiles.toml");
        let env = env_of(&[("TASKMESH_URL", "http://env/mcp")]);
        let s = resolve(&flags(Some("http://flag/mcp"), None), &env, p, Some(FILE)).unwrap();
        assert_eq!(s.url, "http://flag/mcp");
        assert_eq!(
            s.token.as_deref(),
            Some("home-token"),
            "the token still from the profile"
        );
        let s = resolve(&flags(None, None), &env, p, Some(FILE)).unwrap();
        assert_eq!(s.url, "http://env/mcp");
        let s = resolve(&flags(None, None), &env_of(&[]), p, Some(FILE)).unwrap();
        assert_eq!(s.url, "http://home/mcp");
        assert_eq!(s.profile.as_deref(), Some("home"));
    }

    #[test]
    fn a_named_profile_replaces_the_default_and_must_exist() {
        let p = Path::new("profiles.toml");
        let s = resolve(&flags(None, Some("office")), &env_of(&[]), p, Some(FILE)).unwrap();
        assert_eq!(s.url, "http://office.example/mcp");
        assert_eq!(s.token, None);
        assert_eq!(s.protocol, Protocol::V2026);
        let by_env = env_of(&[("TASKMESH_PROFILE", "office")]);
        assert_eq!(
            resolve(&flags(None, None), &by_env, p, Some(FILE))
                .unwrap()
                .url,
            "http://office.example/mcp"
        );
        let e = resolve(&flags(None, Some("nope")), &env_of(&[]), p, Some(FILE)).unwrap_err();
        assert!(matches!(e, SettingsError::NoProfile { .. }), "{e}");
    }

    #[test]
    fn no_url_names_the_three_ways_to_give_one() {
        let e = resolve(&flags(None, None), &env_of(&[]), Path::new("p.toml"), None).unwrap_err();
        let text = e.to_string();
        for way in ["--url", "TASKMESH_URL", "p.toml"] {
            assert!(text.contains(way), "{text}");
        }
    }

    #[test]
    fn bad_files_and_protocols_are_errors() {
        let p = Path::new("p.toml");
        let e = resolve(&flags(None, None), &env_of(&[]), p, Some("default = 3")).unwrap_err();
        assert!(matches!(e, SettingsError::BadFile { .. }));
        let env = env_of(&[
            ("TASKMESH_URL", "http://x/mcp"),
            ("TASKMESH_PROTOCOL", "2024"),
        ]);
        let e = resolve(&flags(None, None), &env, p, None).unwrap_err();
        assert!(matches!(e, SettingsError::BadProtocol { .. }));
    }

    #[test]
    fn the_profile_file_is_found_by_env_then_xdg_then_home() {
        let e = env_of(&[("TASKMESH_PROFILES", "/p.toml"), ("HOME", "/h")]);
        assert_eq!(profile_path(&e), PathBuf::from("/p.toml"));
        let e = env_of(&[("XDG_CONFIG_HOME", "/x"), ("HOME", "/h")]);
        assert_eq!(profile_path(&e), PathBuf::from("/x/taskmesh/profiles.toml"));
        let e = env_of(&[("HOME", "/h")]);
        assert_eq!(
            profile_path(&e),
            PathBuf::from("/h/.config/taskmesh/profiles.toml")
        );
    }

    #[test]
    fn oauth_client_credentials_come_whole_and_not_beside_a_token() {
        let p = Path::new("profiles.toml");
        let file = "[profiles.cc]\nurl = \"http://as/mcp\"\nclient_id = \"app\"\nclient_secret = \"s\"\nscope = \"tasks:read\"\n";
        let s = resolve(&flags(None, Some("cc")), &env_of(&[]), p, Some(file)).unwrap();
        let c = s.oauth.expect("credentials from the profile");
        assert_eq!(
            (
                c.client_id.as_str(),
                c.client_secret.as_str(),
                c.scope.as_deref()
            ),
            ("app", "s", Some("tasks:read"))
        );
        assert_eq!(s.token, None);
        // The environment's id beats the profile's.
        let env = env_of(&[("TASKMESH_CLIENT_ID", "other")]);
        let s = resolve(&flags(None, Some("cc")), &env, p, Some(file)).unwrap();
        assert_eq!(s.oauth.unwrap().client_id, "other");

        let url = Some("http://x/mcp");
        let half = env_of(&[("TASKMESH_CLIENT_ID", "app")]);
        let e = resolve(&flags(url, None), &half, p, None).unwrap_err();
        assert!(e.to_string().contains("--client-secret"), "{e}");
        let half = env_of(&[("TASKMESH_CLIENT_SECRET", "s")]);
        let e = resolve(&flags(url, None), &half, p, None).unwrap_err();
        assert!(e.to_string().contains("--client-id"), "{e}");
        let both = env_of(&[
            ("TASKMESH_TOKEN", "t"),
            ("TASKMESH_CLIENT_ID", "app"),
            ("TASKMESH_CLIENT_SECRET", "s"),
        ]);
        let e = resolve(&flags(url, None), &both, p, None).unwrap_err();
        assert!(e.to_string().contains("one of them"), "{e}");
    }
}
