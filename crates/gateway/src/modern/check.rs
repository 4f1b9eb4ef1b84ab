//! The checks every request of protocol 2026-07-28 passes before its method runs: its `_meta`
//! (protocol version and client capabilities) and its headers (`MCP-Protocol-Version`,
//! `Mcp-Method`, `Mcp-Name`, and on `tools/call` the `Mcp-Param-{name}` headers its tool's
//! input schema mirrors) against its body, as the module doc of [`super`] lists them.
//!
//! A request reaches them from [`super::handle`] (through `serve`), which passes the headers
//! and parameters as they came; what the request declared comes back as [`Declared`].

use axum::http::{HeaderMap, StatusCode};
use base64::Engine;
use serde_json::{json, Map, Value};
use taskmesh_mcp::jsonrpc::ErrorObject;
use taskmesh_task::ClientCaps;

use super::{
    Failure, EXTENSION, HEADER_MISMATCH, META_CAPABILITIES, META_VERSION, METHOD_HEADER,
    NAME_HEADER, SUPPORTED, UNSUPPORTED_VERSION, VERSION_HEADER,
};

fn mismatch(what: impl Into<String>) -> Failure {
    ErrorObject::new(HEADER_MISMATCH, what).into()
}

/// A header's value, decoded from the `=?base64?...?=` form when it has it ([`decoded`]).
fn header_text(headers: &HeaderMap, name: &str) -> Option<String> {
    decoded(headers.get(name)?)
}

/// A routing header's value: decoded when it has the `=?base64?...?=` form (strict Base64
/// with padding, of UTF-8), as it is otherwise (both markers are needed); `None` when it is
/// not visible ASCII or its Base64 is not valid.
fn decoded(raw: &axum::http::HeaderValue) -> Option<String> {
    let text = raw.to_str().ok()?;
    match text
        .strip_prefix("=?base64?")
        .and_then(|r| r.strip_suffix("?="))
    {
        Some(encoded) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .ok()?;
            String::from_utf8(bytes).ok()
        }
        None => Some(text.to_string()),
    }
}

/// What a request declared in its `_meta`.
pub(super) struct Declared {
    /// The tasks extension.
    pub(super) tasks: bool,
    /// `elicitation` and `sampling`: what the tasks it creates may ask the client (in
    /// `inputRequests`).
    pub(super) client: ClientCaps,
    /// The client capabilities as declared.
    pub(super) caps: Map<String, Value>,
}

/// `-32602` with HTTP 400, for a request whose `_meta` lacks what every request carries.
fn malformed(message: impl Into<String>) -> Failure {
    Failure {
        error: ErrorObject::invalid_params(message),
        status: Some(StatusCode::BAD_REQUEST),
    }
}

/// The entry `key` of `_meta`, read by `read`; an absent one or one of another type is
/// `-32602` naming it and the type it must have (`what`).
fn meta_field<'a, T: ?Sized>(
    meta: &'a Map<String, Value>,
    key: &str,
    read: fn(&'a Value) -> Option<&'a T>,
    what: &str,
) -> Result<&'a T, Failure> {
    meta.get(key)
        .and_then(read)
        .ok_or_else(|| malformed(format!("Invalid params: '_meta.{key}' must be {what}")))
}

/// Check the request's `_meta` and headers (see the module doc).
pub(super) fn check(
    headers: &HeaderMap,
    method: &str,
    p: &Map<String, Value>,
) -> Result<Declared, Failure> {
    let meta = p.get("_meta").and_then(Value::as_object).ok_or_else(|| {
        malformed(
            "Invalid params: every request carries '_meta' with its protocol version and \
             client capabilities",
        )
    })?;
    let version = meta_field(meta, META_VERSION, Value::as_str, "a string")?;
    let caps = meta_field(meta, META_CAPABILITIES, Value::as_object, "an object")?;
    // The header is compared first: a body that names an unsupported version under a header
    // that names another one is a mismatch.
    match headers.get(VERSION_HEADER).and_then(|v| v.to_str().ok()) {
        Some(h) if h == version => {}
        Some(h) => {
            return Err(mismatch(format!(
                "MCP-Protocol-Version header {h:?} differs from the request's protocol version {version:?}"
            )))
        }
        None => return Err(mismatch("the MCP-Protocol-Version header is required")),
    }
    if !SUPPORTED.contains(&version) {
        return Err(ErrorObject {
            code: UNSUPPORTED_VERSION,
            message: format!("Unsupported protocol version: {version}"),
            data: Some(json!({ "supported": SUPPORTED, "requested": version })),
        }
        .into());
    }
    match header_text(headers, METHOD_HEADER) {
        Some(m) if m == method => {}
        Some(m) => {
            return Err(mismatch(format!(
                "Mcp-Method header {m:?} differs from the request's method {method:?}"
            )))
        }
        None => return Err(mismatch("the Mcp-Method header is required")),
    }
    let named = match method {
        "tools/call" => Some("name"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    };
    if let Some(field) = named {
        let want = p.get(field).and_then(Value::as_str).unwrap_or_default();
        match header_text(headers, NAME_HEADER) {
            Some(n) if n.trim() == want => {}
            Some(n) => {
                return Err(mismatch(format!(
                    "Mcp-Name header {n:?} differs from the request's {field} {want:?}"
                )))
            }
            None => {
                return Err(mismatch(format!(
                    "the Mcp-Name header is required on {method}"
                )))
            }
        }
    }
    let tasks = caps
        .get("extensions")
        .and_then(|e| e.get(EXTENSION))
        .is_some_and(Value::is_object);
    Ok(Declared {
        tasks,
        client: ClientCaps {
            elicitation: caps.get("elicitation").is_some_and(Value::is_object),
            sampling: caps.get("sampling").is_some_and(Value::is_object),
            // Client-hosted tasks are not part of this generation.
            ..ClientCaps::default()
        },
        caps: caps.clone(),
    })
}

/// The parameters a tool's input schema mirrors into `Mcp-Param-{name}` headers
/// (`x-mcp-header`): each header name with the property path it mirrors, for the properties
/// reachable from the root through `properties` keys alone (an annotation elsewhere mirrors
/// nothing).
fn header_params(schema: &Value) -> Vec<(String, Vec<String>)> {
    fn walk(schema: &Value, path: &mut Vec<String>, out: &mut Vec<(String, Vec<String>)>) {
        let Some(props) = schema.get("properties").and_then(Value::as_object) else {
            return;
        };
        for (key, prop) in props {
            path.push(key.clone());
            if let Some(name) = prop.get("x-mcp-header").and_then(Value::as_str) {
                out.push((name.to_string(), path.clone()));
            }
            walk(prop, path, out);
            path.pop();
        }
    }
    let mut out = Vec::new();
    walk(schema, &mut Vec::new(), &mut out);
    out
}

/// A `tools/call`'s `Mcp-Param-{name}` headers against its arguments: each parameter the
/// tool mirrors ([`header_params`]) has its header exactly when the arguments have a value
/// there, and the header (decoded from `=?base64?...?=`, strictly) reads as the value does
/// (a string as it is, an integer in decimal, a boolean as `true`/`false`); else `-32020`
/// (HTTP 400).
pub(super) fn check_param_headers(
    headers: &HeaderMap,
    schema: &Value,
    args: Option<&Map<String, Value>>,
) -> Result<(), Failure> {
    for (name, path) in header_params(schema) {
        let mut at = args.map(|a| Value::Object(a.clone()));
        for key in &path {
            at = at.and_then(|v| v.get(key).cloned());
        }
        let expected = match at {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s),
            Some(other) => Some(other.to_string()),
        };
        let header = format!("mcp-param-{}", name.to_ascii_lowercase());
        let given = match headers.get(&header) {
            None => None,
            Some(raw) => Some(decoded(raw).ok_or_else(|| {
                mismatch(format!(
                    "Mcp-Param-{name}: not a valid header value (visible ASCII, or =?base64?...?= with valid Base64 of UTF-8)"
                ))
            })?),
        };
        let field = path.join(".");
        match (expected, given) {
            (None, None) => {}
            (Some(_), None) => {
                return Err(mismatch(format!(
                "the Mcp-Param-{name} header is required: the arguments have a value at '{field}'"
            )))
            }
            (None, Some(_)) => {
                return Err(mismatch(format!(
                    "Mcp-Param-{name} header given, but the arguments have no value at '{field}'"
                )))
            }
            (Some(want), Some(got)) if want != got => {
                return Err(mismatch(format!(
                    "Mcp-Param-{name} header {got:?} differs from the arguments' '{field}' {want:?}"
                )))
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirrored_parameters_are_found_through_properties_only() {
        let schema = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "db": {"type": "object", "properties": {"shard": {"type": "integer", "x-mcp-header": "Shard"}}},
            "list": {"type": "array", "items": {"type": "object", "properties": {"x": {"x-mcp-header": "X"}}}},
        }, "allOf": [{"properties": {"y": {"x-mcp-header": "Y"}}}]});
        let mut found = header_params(&schema);
        found.sort();
        assert_eq!(
            found,
            vec![
                ("Region".to_string(), vec!["region".to_string()]),
                (
                    "Shard".to_string(),
                    vec!["db".to_string(), "shard".to_string()]
                ),
            ]
        );
        let args = json!({"region": "eu", "db": {"shard": 7}});
        let mut h = HeaderMap::new();
        h.insert("mcp-param-region", "=?base64?ZXU=?=".parse().unwrap());
        h.insert("mcp-param-shard", "7".parse().unwrap());
        assert!(check_param_headers(&h, &schema, args.as_object()).is_ok());
        h.insert("mcp-param-shard", "8".parse().unwrap());
        assert!(check_param_headers(&h, &schema, args.as_object()).is_err());
        h.remove("mcp-param-shard");
        assert!(check_param_headers(&h, &schema, args.as_object()).is_err());
        h.insert("mcp-param-shard", "7".parse().unwrap());
        h.insert("mcp-param-region", "=?base64?ZXU?=".parse().unwrap());
        assert!(
            check_param_headers(&h, &schema, args.as_object()).is_err(),
            "no padding"
        );
    }

    #[test]
    fn header_values_decode_from_their_base64_form() {
        let mut h = HeaderMap::new();
        h.insert(NAME_HEADER, "plain-name".parse().unwrap());
        assert_eq!(header_text(&h, NAME_HEADER).as_deref(), Some("plain-name"));
        // "héllo" in base64.
        h.insert(NAME_HEADER, "=?base64?aMOpbGxv?=".parse().unwrap());
        assert_eq!(header_text(&h, NAME_HEADER).as_deref(), Some("héllo"));
        h.insert(NAME_HEADER, "=?base64?!!!?=".parse().unwrap());
        assert_eq!(header_text(&h, NAME_HEADER), None);
    }
}
