//! Typed reads of request parameters. Every failure is a `-32602` whose message names the
//! parameter, so a client learns exactly what to fix.

use serde_json::{Map, Value};

use crate::jsonrpc::ErrorObject;

/// The params object, or an empty one when absent. Arrays are rejected (MCP uses named params).
pub fn object(params: Option<&Value>) -> Result<&Map<String, Value>, ErrorObject> {
    static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
    match params {
        None | Some(Value::Null) => Ok(EMPTY.get_or_init(Map::new)),
        Some(Value::Object(m)) => Ok(m),
        Some(_) => Err(ErrorObject::invalid_params(
            "Invalid params: params must be an object",
        )),
    }
}

/// A required string parameter.
pub fn req_str<'a>(p: &'a Map<String, Value>, name: &str) -> Result<&'a str, ErrorObject> {
    match p.get(name) {
        Some(Value::String(s)) => Ok(s),
        None => Err(ErrorObject::invalid_params(format!(
            "Invalid params: missing required parameter '{name}'"
        ))),
        Some(_) => Err(ErrorObject::invalid_params(format!(
            "Invalid params: '{name}' must be a string"
        ))),
    }
}

/// An optional string parameter (`null` counts as absent).
pub fn opt_str<'a>(p: &'a Map<String, Value>, name: &str) -> Result<Option<&'a str>, ErrorObject> {
    match p.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ErrorObject::invalid_params(format!(
            "Invalid params: '{name}' must be a string"
        ))),
    }
}

/// An optional object parameter (`null` counts as absent).
pub fn opt_obj<'a>(
    p: &'a Map<String, Value>,
    name: &str,
) -> Result<Option<&'a Map<String, Value>>, ErrorObject> {
    match p.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(m)) => Ok(Some(m)),
        Some(_) => Err(ErrorObject::invalid_params(format!(
            "Invalid params: '{name}' must be an object"
        ))),
    }
}

/// An optional non-negative integer parameter (`null` counts as absent).
pub fn opt_u64(p: &Map<String, Value>, name: &str) -> Result<Option<u64>, ErrorObject> {
    match p.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n.as_u64().map(Some).ok_or_else(|| {
            ErrorObject::invalid_params(format!(
                "Invalid params: '{name}' must be a non-negative integer"
            ))
        }),
        Some(_) => Err(ErrorObject::invalid_params(format!(
            "Invalid params: '{name}' must be a non-negative integer"
        ))),
    }
}

/// A required finite number parameter.
pub fn req_f64(p: &Map<String, Value>, name: &str) -> Result<f64, ErrorObject> {
    match p.get(name) {
        Some(Value::Number(n)) => n.as_f64().ok_or_else(|| {
            ErrorObject::invalid_params(format!("Invalid params: '{name}' must be a number"))
        }),
        None => Err(ErrorObject::invalid_params(format!(
            "Invalid params: missing required parameter '{name}'"
        ))),
        Some(_) => Err(ErrorObject::invalid_params(format!(
            "Invalid params: '{name}' must be a number"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn errors_name_the_parameter() {
        let v = json!({"taskId": 5, "ttl": -1, "cursor": "c"});
        let p = object(Some(&v)).unwrap();
        let e = req_str(p, "taskId").unwrap_err();
        assert_eq!(e.code, crate::jsonrpc::INVALID_PARAMS);
        assert!(e.message.contains("taskId"));
        assert!(opt_u64(p, "ttl").unwrap_err().message.contains("ttl"));
        assert_eq!(opt_str(p, "cursor").unwrap(), Some("c"));
        assert!(req_str(p, "missing")
            .unwrap_err()
            .message
            .contains("missing"));
        assert!(object(Some(&json!([1]))).is_err());
    }
}
