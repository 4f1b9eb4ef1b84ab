//! `taskmesh webhooks`: the operator's webhooks (`[[webhooks]]`) and the clients'
//! subscriptions (`events/subscribe`), and what the deliveries of the node at `--url` to each
//! came to, read from its `GET /status` (the caller's principal must be in
//! `auth.status_principals`). Every node has the same webhooks and subscriptions; each
//! delivers the events of the shards it leads, so each node's figures are its own.

use super::settings::ConnFlags;
use super::{output, Failure, EXIT_OK};

/// `taskmesh webhooks`.
#[derive(clap::Args)]
pub struct WebhooksArgs {
    /// Print the webhooks as JSON (`{"node": ID, "webhooks": [...]}`).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub conn: ConnFlags,
}

/// Run `taskmesh webhooks`.
pub(super) async fn run(a: WebhooksArgs) -> Result<u8, Failure> {
    let status = super::workers::read_status(&a.conn).await?;
    let hooks = status["webhooks"].as_array().cloned().unwrap_or_default();
    if a.json {
        output::print_json(&serde_json::json!({ "node": status["node"], "webhooks": hooks }));
    } else {
        println!(
            "{}",
            output::webhooks_table(&hooks, super::stdout_is_terminal())
        );
    }
    Ok(EXIT_OK)
}
