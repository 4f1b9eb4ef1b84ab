//! A node's Prometheus metrics as the tests read them: the text of `GET /metrics` and the
//! value of one series in it.

use crate::http;

/// The text of `GET /metrics` next to the MCP endpoint `mcp_url` (or at a `/metrics` URL),
/// with `token` as the bearer token when given; panics unless the answer is 200.
pub async fn metrics_of(mcp_url: &str, token: Option<&str>) -> String {
    let url = if mcp_url.ends_with("/metrics") {
        mcp_url.to_string()
    } else {
        mcp_url.replace("/mcp", "/metrics")
    };
    let mut req = http().get(&url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let r = req.send().await.expect("GET /metrics");
    assert_eq!(r.status().as_u16(), 200, "GET {url}");
    r.text().await.expect("the metrics text")
}

/// The value of the sample `series` (its name and labels exactly as rendered) in `text`.
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// The sum of every sample of the metric `name`, whatever its labels.
pub fn sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
