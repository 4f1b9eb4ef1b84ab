//! What a node's deliveries to a webhook came to, as `GET /status` and `taskmesh webhooks`
//! show it.

/// What one node's deliveries to a webhook came to since the node started (`GET /status`,
/// `taskmesh webhooks`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryStats {
    /// Attempts made.
    pub attempts: u64,
    /// Events acknowledged (2xx).
    pub acked: u64,
    /// Events refused for good (410, 413).
    pub refused: u64,
    /// Events given up after their attempts or window ran out.
    pub abandoned: u64,
    /// Since when this node has suspended deliveries to it after sustained failure, in ms
    /// since the Unix epoch; absent while it is not suspended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suspended_since_ms: Option<u64>,
    /// When the last acknowledged attempt was answered, in ms since the Unix epoch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_delivery_at_ms: Option<u64>,
    /// The category of the last failed attempt (`connection_refused`, `timeout`, `tls_error`,
    /// `http_4xx`, `http_5xx`); never anything the receiver said.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<&'static str>,
    /// Since when every attempt failed (cleared by an acknowledgment), in ms since the Unix
    /// epoch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failing_since_ms: Option<u64>,
}

/// A webhook as a node sees it: its configuration (never its secret) and its deliveries there.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookStatus {
    /// `operator` (`[[webhooks]]`) or `client` (`events/subscribe`).
    pub kind: &'static str,
    /// Its name: an operator webhook's, or a client subscription's id.
    pub name: String,
    /// Its subscription id (`X-MCP-Subscription-Id`).
    pub subscription: String,
    /// Where it is sent.
    pub url: String,
    /// Whether it gets only the ends of tasks.
    pub terminal_only: bool,
    /// The principals it covers; empty: every principal.
    pub principals: Vec<String>,
    /// The one task a client subscription covers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// When a client subscription lapses unless refreshed, ms since the Unix epoch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
    /// Deliveries to it this node has in flight now (attempting, waiting to retry, or
    /// acknowledged and not yet settled).
    pub in_flight: usize,
    /// What this node's deliveries to it came to.
    pub deliveries: DeliveryStats,
}
