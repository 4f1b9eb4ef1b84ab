//! The notifications a server sends about a call in progress, serialised once by whoever
//! relays them: a plain call's stream (2025-11-25), an input round's stream (2026-07-28), a
//! task's actor (with the related-task `_meta`).

use serde::Serialize;
use serde_json::Value;

use crate::{jsonrpc, LogLevel};

/// The related-task `_meta` of a task's notification.
#[derive(Serialize)]
struct Meta<'a> {
    #[serde(rename = "io.modelcontextprotocol/related-task")]
    related: Related<'a>,
}

#[derive(Serialize)]
struct Related<'a> {
    #[serde(rename = "taskId")]
    task_id: &'a str,
}

fn related(task_id: Option<&str>) -> Option<Meta<'_>> {
    task_id.map(|task_id| Meta {
        related: Related { task_id },
    })
}

/// A log message of a running tool for its client (`notifications/message`).
#[derive(Debug, Clone, PartialEq)]
pub struct LogMessage {
    /// Its severity; the client's `logging/setLevel` decides whether it is sent.
    pub level: LogLevel,
    /// Who logged it, when the tool names it.
    pub logger: Option<String>,
    /// The message: any JSON.
    pub data: Value,
}

impl LogMessage {
    /// A message at level `info` without a logger.
    pub fn info(data: Value) -> Self {
        Self {
            level: LogLevel::Info,
            logger: None,
            data,
        }
    }
}

/// `notifications/message` carrying `m`, and for a task's call the related-task `_meta`
/// naming `task_id`.
pub fn message(m: &LogMessage, task_id: Option<&str>) -> Vec<u8> {
    #[derive(Serialize)]
    struct Params<'a> {
        level: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        logger: Option<&'a str>,
        data: &'a Value,
        #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
        meta: Option<Meta<'a>>,
    }
    let params = Params {
        level: m.level.as_str(),
        logger: m.logger.as_deref(),
        data: &m.data,
        meta: related(task_id),
    };
    jsonrpc::notification("notifications/message", &params)
}

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
    jsonrpc::notification(
        "notifications/progress",
        &Params {
            progress_token: token,
            progress,
            total,
            message,
            meta: related(task_id),
        },
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::META_RELATED_TASK;

    #[test]
    fn a_log_message_carries_its_logger_when_named_and_the_related_task() {
        let m = LogMessage {
            level: LogLevel::Warning,
            logger: None,
            data: json!({"n": 1}),
        };
        let plain: Value = serde_json::from_slice(&message(&m, None)).unwrap_or_default();
        assert_eq!(
            plain,
            json!({"jsonrpc": "2.0", "method": "notifications/message",
                   "params": {"level": "warning", "data": {"n": 1}}})
        );
        let named = LogMessage {
            logger: Some("db".into()),
            ..m
        };
        let full: Value = serde_json::from_slice(&message(&named, Some("t-1"))).unwrap_or_default();
        assert_eq!(full["params"]["logger"], "db");
        assert_eq!(full["params"]["_meta"][META_RELATED_TASK]["taskId"], "t-1");
    }

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
