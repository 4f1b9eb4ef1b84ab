//! Where a configuration comes from: the defaults, then a TOML file, then `TASKMESH_*`
//! environment variables, then command-line flags ([`Config::load`]), checked once whole
//! (`validate.rs`).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{bail, Context};

use super::Config;

/// Command-line overrides (highest precedence).
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--listen ADDR`: replaces `listen` when given.
    pub listen: Option<SocketAddr>,
    /// `--data-dir DIR`: replaces `data_dir` when given.
    pub data_dir: Option<PathBuf>,
}

const ENV_PREFIX: &str = "TASKMESH_";

/// Parse an environment value: TOML when it is one, else a string.
fn env_value(raw: &str) -> toml::Value {
    toml::from_str::<toml::Table>(&format!("v = {raw}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_string()))
}

impl Config {
    /// Load: defaults <- file <- `env` (TASKMESH_* pairs) <- overrides.
    pub fn load(
        file: Option<&std::path::Path>,
        env: impl IntoIterator<Item = (String, String)>,
        overrides: Overrides,
    ) -> anyhow::Result<Self> {
        let text = match file {
            Some(path) => Some(
                std::fs::read_to_string(path)
                    .with_context(|| format!("reading config file {}", path.display()))?,
            ),
            None => None,
        };
        let origin = file.map(|p| p.display().to_string()).unwrap_or_default();
        Self::parse(text.as_deref(), &origin, env, overrides)
    }

    /// [`Config::load`] of a file's text (`None`: no file); `origin` names the file in errors.
    pub fn parse(
        text: Option<&str>,
        origin: &str,
        env: impl IntoIterator<Item = (String, String)>,
        overrides: Overrides,
    ) -> anyhow::Result<Self> {
        let mut table = match text {
            Some(text) => toml::from_str::<toml::Table>(text)
                .with_context(|| format!("parsing config file {origin}"))?,
            None => toml::Table::new(),
        };
        for (key, raw) in env {
            let Some(name) = key.strip_prefix(ENV_PREFIX) else {
                continue;
            };
            if name == "CONFIG" {
                continue;
            }
            let path: Vec<String> = name.split("__").map(|p| p.to_ascii_lowercase()).collect();
            let mut cur = &mut table;
            for section in &path[..path.len() - 1] {
                let entry = cur
                    .entry(section.clone())
                    .or_insert_with(|| toml::Value::Table(toml::Table::new()));
                cur = match entry {
                    toml::Value::Table(t) => t,
                    _ => bail!("environment variable {key}: '{section}' is not a section"),
                };
            }
            cur.insert(path[path.len() - 1].clone(), env_value(&raw));
        }
        let mut cfg: Config = toml::Value::Table(table)
            .try_into()
            .context("invalid configuration")?;
        if let Some(l) = overrides.listen {
            cfg.listen = l;
        }
        if let Some(d) = overrides.data_dir {
            cfg.data_dir = d;
        }
        cfg.validate()?;
        Ok(cfg)
    }
}
