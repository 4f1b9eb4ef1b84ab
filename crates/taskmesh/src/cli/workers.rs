//! `taskmesh workers`: the live worker registrations of a cluster, per node, as the node at
//! `--url` knows them (its own, and its peers' from their worker digests), read from its
//! `GET /status` (the caller's principal must be in `auth.status_principals`).

use serde_json::Value;

use super::settings::{self, ConnFlags};
use super::{output, Failure, EXIT_OK};

/// `taskmesh workers`.
#[derive(clap::Args)]
pub struct WorkersArgs {
    /// Print the registrations as JSON (`{"workers": [...]}`).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub conn: ConnFlags,
}

/// The server's `GET /status` URL for the MCP endpoint `url`.
fn status_url(url: &str) -> String {
    let base = url.trim_end_matches('/');
    format!("{}/status", base.strip_suffix("/mcp").unwrap_or(base))
}

/// The `GET /status` of the node at the profile's URL, as JSON. The caller's principal must be
/// in `auth.status_principals`.
pub(super) async fn read_status(conn: &ConnFlags) -> Result<Value, Failure> {
    let s = settings::load(conn).map_err(|e| Failure::usage(e.to_string()))?;
    let mut req = reqwest::Client::new().get(status_url(&s.url));
    if let Some(t) = &s.token {
        req = req.bearer_auth(t);
    }
    let r = req
        .send()
        .await
        .map_err(|e| Failure::connect(format!("{}: {e}", s.url)))?;
    let code = r.status();
    if !code.is_success() {
        let why = match code.as_u16() {
            401 | 403 => "the token's principal may not read the status (auth.status_principals)",
            _ => "the server refused",
        };
        return Err(Failure::connect(format!("GET /status: {code}: {why}")));
    }
    r.json()
        .await
        .map_err(|e| Failure::connect(format!("GET /status: not JSON: {e}")))
}

/// Run `taskmesh workers`.
pub(super) async fn run(a: WorkersArgs) -> Result<u8, Failure> {
    let status = read_status(&a.conn).await?;
    let workers = status["workers"].as_array().cloned().unwrap_or_default();
    if a.json {
        output::print_json(&serde_json::json!({ "workers": workers }));
    } else {
        println!(
            "{}",
            output::workers_table(&workers, super::stdout_is_terminal())
        );
    }
    Ok(EXIT_OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_is_read_beside_the_mcp_endpoint() {
        assert_eq!(
            status_url("http://127.0.0.1:8080/mcp"),
            "http://127.0.0.1:8080/status"
        );
        assert_eq!(
            status_url("http://127.0.0.1:8080/"),
            "http://127.0.0.1:8080/status"
        );
    }
}
