//! The notifications a server sends about a call in progress, serialised once by whoever
//! relays them: a plain call's stream (2025-11-25), an input round's stream (2026-07-28), a
//! task's actor (with the related-task `_meta`).

use serde::Serialize;
use serde_json::Value;

use crate::jsonrpc;

/// `notifications/progress` for the request whose `_meta.progressToken` is `token`: `progress`
/// of `total` (when known) with a `message` (when given), and for a task's call the
/// related-task `_meta` naming `task_id`.
pub fn progress(
    token: &Value,
    progress: f64,
    total: Option<f64>,
    message: Option<&str>,
    task_id: Option<&str>,
) -> Vec<u8> {
    #[derive(Serialize)]
    struct Related<'a> {
        #[serde(rename = "taskId")]
        task_id: &'a str,
    }
    #[derive(Serialize)]
    struct Meta<'a> {
        #[serde(rename = "io.modelcontextprotocol/related-task")]
        related: Related<'a>,
    }
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Params<'a> {
        progress_token: &'a Value,
        progress: f64,
        #[serde(skip_serializing_if = "Option::is_none")]
        total: Option<f64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<&'a str>,
        #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
        meta: Option<Meta<'a>>,
    }
    let meta = task_id.map(|task_id| Meta {
        related: Related { task_id },
    });
    jsonrpc::notification(
        "notifications/progress",
        &Params {
            progress_token: token,
            progress,
            total,
            message,
            meta,
        },
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::META_RELATED_TASK;

    #[test]
    fn progress_carries_what_is_known_and_the_related_task() {
        let plain: Value = serde_json::from_slice(&progress(&json!("p1"), 1.0, None, None, None))
            .unwrap_or_default();
        assert_eq!(
            plain,
            json!({"jsonrpc": "2.0", "method": "notifications/progress",
                   "params": {"progressToken": "p1", "progress": 1.0}})
        );
        let full: Value = serde_json::from_slice(&progress(
            &json!(7),
            50.0,
            Some(100.0),
            Some("half"),
            Some("t-1"),
        ))
        .unwrap_or_default();
        assert_eq!(
            full["params"],
            json!({"progressToken": 7, "progress": 50.0, "total": 100.0, "message": "half",
                   "_meta": {META_RELATED_TASK: {"taskId": "t-1"}}})
        );
    }
}
