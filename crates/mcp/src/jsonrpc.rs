//! JSON-RPC 2.0 envelope: classification of an incoming body and serialisation of answers.
//!
//! MCP 2025-06-18 and later forbid batches; a JSON array is answered with `-32600` like any
//! other value that is not a single JSON-RPC message. A message that is JSON but holds a number
//! no parameter can take (`1e400`) is answered `-32602` with its id, naming the field
//! (`values.rs`).

mod values;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// Parse error: the body is not valid JSON.
pub const PARSE_ERROR: i64 = -32700;
/// The JSON is not a valid JSON-RPC request (including batches).
pub const INVALID_REQUEST: i64 = -32600;
/// Unknown method, or a tool's `taskSupport` forbids the way it was called.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// Wrong or missing parameters, unknown task ids, bad cursors, cancel of a terminal task.
pub const INVALID_PARAMS: i64 = -32602;
/// Internal failure.
pub const INTERNAL_ERROR: i64 = -32603;
/// Server-defined: a configured capacity limit (live tasks per node) was reached.
pub const CAPACITY_EXCEEDED: i64 = -32001;
/// Server-defined: the request was cancelled by `notifications/cancelled`.
pub const REQUEST_CANCELLED: i64 = -32800;

/// A JSON-RPC request id: a string or an integer (null ids are not accepted for requests).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RequestId {
    /// An integer id (one that fits in an `i64`).
    Number(i64),
    /// A string id.
    String(String),
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestId::Number(n) => write!(f, "{n}"),
            RequestId::String(s) => write!(f, "{s}"),
        }
    }
}

/// A JSON-RPC error object, exactly as it travels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    /// The error code (`code`), one of the constants of this module or the client's own.
    pub code: i64,
    /// Short description of the error (`message`), for people.
    pub message: String,
    /// Extra detail (`data`), left out of the JSON when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl ErrorObject {
    /// An error with `code` and `message` and no `data`.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }
    /// A `-32602` (invalid params) error with `message`.
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(INVALID_PARAMS, message)
    }
    /// A `-32601` error that names the unknown `method`.
    pub fn method_not_found(method: &str) -> Self {
        Self::new(METHOD_NOT_FOUND, format!("Method not found: {method}"))
    }
    /// A `-32603` (internal error) with `message`.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(INTERNAL_ERROR, message)
    }
}

/// One classified incoming JSON-RPC message.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A request from the client: it has an id and gets exactly one response.
    Request {
        /// Its id, echoed in the response.
        id: RequestId,
        /// The method called, e.g. `tools/call`.
        method: String,
        /// Its `params` (an object or an array), when present.
        params: Option<Value>,
    },
    /// A notification from the client: a method without an id; it gets no response.
    Notification {
        /// The notification's method, e.g. `notifications/cancelled`.
        method: String,
        /// Its `params` (an object or an array), when present.
        params: Option<Value>,
    },
    /// A response from the client to a request this server sent (elicitation, sampling, ping).
    Response {
        /// Id of the server's request being answered.
        id: RequestId,
        /// The client's `result`, or its `error` object.
        outcome: Result<Value, ErrorObject>,
    },
}

/// Why a body is not a usable JSON-RPC message. The gateway answers these with an error whose
/// id is [`EnvelopeError::id`]: `null` but for a request whose params cannot be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EnvelopeError {
    /// The body is empty or not JSON; answered with `-32700`.
    #[error("Parse error: {0}")]
    Parse(String),
    /// The body is JSON but not one valid JSON-RPC message (a batch, not an object, a wrong
    /// `jsonrpc`, a null request id, ...); answered with `-32600`.
    #[error("Invalid Request: {0}")]
    Invalid(String),
    /// A valid message whose `params` hold a value no parameter can take (a number beyond the
    /// range of a double, such as `1e400`); answered with `-32602` naming the field, and the
    /// request's id (none for a notification).
    #[error("Invalid params: {message}")]
    Params {
        /// The request's id; `None` for a notification.
        id: Option<RequestId>,
        /// What is wrong, naming the field by its path in `params` (`task.ttl`).
        message: String,
    },
}

impl EnvelopeError {
    /// The JSON-RPC error to answer with: `-32700` for `Parse`, `-32600` for `Invalid`,
    /// `-32602` for `Params`, with this error's text as the message.
    pub fn to_error(&self) -> ErrorObject {
        let code = match self {
            EnvelopeError::Parse(_) => PARSE_ERROR,
            EnvelopeError::Invalid(_) => INVALID_REQUEST,
            EnvelopeError::Params { .. } => INVALID_PARAMS,
        };
        ErrorObject::new(code, self.to_string())
    }

    /// The id to answer with: the request's, when it could be read and the message is a
    /// request.
    pub fn id(&self) -> Option<&RequestId> {
        match self {
            EnvelopeError::Params { id, .. } => id.as_ref(),
            EnvelopeError::Parse(_) | EnvelopeError::Invalid(_) => None,
        }
    }
}

/// A message's envelope. `V` is how its values are read: built (`Value`), or left as raw text
/// (`&RawValue`) when a value in them cannot be built (see [`values`]).
#[derive(Deserialize)]
#[serde(bound(deserialize = "V: Deserialize<'de>"))]
pub(super) struct RawEnvelope<'a, V> {
    #[serde(borrow)]
    pub(super) jsonrpc: Option<&'a RawValue>,
    /// Present-but-null must stay distinguishable from absent (a null id is invalid).
    #[serde(default, borrow, deserialize_with = "present")]
    pub(super) id: Option<&'a RawValue>,
    #[serde(default)]
    pub(super) method: Option<String>,
    #[serde(default)]
    pub(super) params: Option<V>,
    #[serde(default)]
    pub(super) result: Option<V>,
    #[serde(default)]
    pub(super) error: Option<V>,
}

fn present<'de, D>(d: D) -> Result<Option<&'de RawValue>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    <&'de RawValue as Deserialize<'de>>::deserialize(d).map(Some)
}

/// Classify one request body.
pub fn parse_message(body: &[u8]) -> Result<Message, EnvelopeError> {
    let first = body
        .iter()
        .copied()
        .find(|b| !b.is_ascii_whitespace())
        .ok_or_else(|| EnvelopeError::Parse("empty body".into()))?;
    if let Err(e) = std::str::from_utf8(body) {
        return Err(EnvelopeError::Parse(format!(
            "the body is not valid UTF-8 (at byte {})",
            e.valid_up_to()
        )));
    }
    if first == b'[' {
        // Validate it is JSON at all, so that garbage starting with '[' is a parse error.
        serde_json::from_slice::<serde::de::IgnoredAny>(body)
            .map_err(|e| EnvelopeError::Parse(e.to_string()))?;
        return Err(EnvelopeError::Invalid(
            "batch requests are not supported; send one JSON-RPC message per POST".into(),
        ));
    }
    if first != b'{' {
        serde_json::from_slice::<serde::de::IgnoredAny>(body)
            .map_err(|e| EnvelopeError::Parse(e.to_string()))?;
        return Err(EnvelopeError::Invalid("expected a JSON object".into()));
    }
    let env: RawEnvelope<'_, Value> = match serde_json::from_slice(body) {
        Ok(env) => env,
        // JSON of the wrong shape.
        Err(e) if e.classify() == serde_json::error::Category::Data => {
            return Err(EnvelopeError::Invalid(e.to_string()))
        }
        // Not JSON (a syntax error: also a string that is not Unicode, such as a lone
        // surrogate escape), or JSON with a value that cannot be built (a number out of range).
        Err(e) => {
            return Err(values::unreadable(body).unwrap_or(EnvelopeError::Parse(e.to_string())))
        }
    };
    let id = envelope_id(env.jsonrpc, env.id)?;
    if let Some(params) = &env.params {
        if !params.is_object() && !params.is_array() {
            return Err(EnvelopeError::Invalid(
                "\"params\" must be an object or an array".into(),
            ));
        }
    }
    match (env.method, id) {
        (Some(method), Some(Some(id))) => {
            if env.result.is_some() || env.error.is_some() {
                return Err(EnvelopeError::Invalid(
                    "a request carries no result or error".into(),
                ));
            }
            Ok(Message::Request {
                id,
                method,
                params: env.params,
            })
        }
        (Some(_), Some(None)) => Err(EnvelopeError::Invalid("request id must not be null".into())),
        (Some(method), None) => Ok(Message::Notification {
            method,
            params: env.params,
        }),
        (None, Some(Some(id))) => match (env.result, env.error) {
            (Some(result), None) => Ok(Message::Response {
                id,
                outcome: Ok(result),
            }),
            (None, Some(error)) => {
                let error: ErrorObject = serde_json::from_value(error)
                    .map_err(|e| EnvelopeError::Invalid(format!("bad error object: {e}")))?;
                Ok(Message::Response {
                    id,
                    outcome: Err(error),
                })
            }
            _ => Err(EnvelopeError::Invalid(
                "a response carries exactly one of result and error".into(),
            )),
        },
        _ => Err(EnvelopeError::Invalid("missing \"method\"".into())),
    }
}

/// The message's id, after checking its `jsonrpc`: `None` without one, `Some(None)` for a
/// null one.
fn envelope_id(
    jsonrpc: Option<&RawValue>,
    id: Option<&RawValue>,
) -> Result<Option<Option<RequestId>>, EnvelopeError> {
    match jsonrpc.map(|v| v.get()) {
        Some("\"2.0\"") => {}
        _ => return Err(EnvelopeError::Invalid("\"jsonrpc\" must be \"2.0\"".into())),
    }
    id.map(parse_id).transpose()
}

/// `Ok(None)` for a null id.
fn parse_id(raw: &RawValue) -> Result<Option<RequestId>, EnvelopeError> {
    match serde_json::from_str::<Value>(raw.get()) {
        Ok(Value::Null) => Ok(None),
        Ok(Value::String(s)) => Ok(Some(RequestId::String(s))),
        Ok(Value::Number(n)) => n
            .as_i64()
            .map(|n| Some(RequestId::Number(n)))
            .ok_or_else(|| EnvelopeError::Invalid("id must be a string or an integer".into())),
        _ => Err(EnvelopeError::Invalid(
            "id must be a string or an integer".into(),
        )),
    }
}

/// Serialise a success response.
pub fn response(id: &RequestId, result: &impl Serialize) -> Vec<u8> {
    #[derive(Serialize)]
    struct Out<'a, R> {
        jsonrpc: &'static str,
        id: &'a RequestId,
        result: &'a R,
    }
    serde_json::to_vec(&Out {
        jsonrpc: "2.0",
        id,
        result,
    })
    .unwrap_or_else(|_| error_response(Some(id), &ErrorObject::internal("serialisation failed")))
}

/// Serialise an error response (`id` is `null` when the request's id could not be read).
pub fn error_response(id: Option<&RequestId>, error: &ErrorObject) -> Vec<u8> {
    #[derive(Serialize)]
    struct Out<'a> {
        jsonrpc: &'static str,
        id: Option<&'a RequestId>,
        error: &'a ErrorObject,
    }
    serde_json::to_vec(&Out {
        jsonrpc: "2.0",
        id,
        error,
    })
    .unwrap_or_else(|_| b"{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32603,\"message\":\"serialisation failed\"}}".to_vec())
}

/// Serialise a notification.
pub fn notification(method: &str, params: &impl Serialize) -> Vec<u8> {
    #[derive(Serialize)]
    struct Out<'a, P> {
        jsonrpc: &'static str,
        method: &'a str,
        params: &'a P,
    }
    serde_json::to_vec(&Out {
        jsonrpc: "2.0",
        method,
        params,
    })
    .unwrap_or_default()
}

/// Serialise a server-to-client request.
pub fn request(id: &RequestId, method: &str, params: &Value) -> Vec<u8> {
    #[derive(Serialize)]
    struct Out<'a> {
        jsonrpc: &'static str,
        id: &'a RequestId,
        method: &'a str,
        params: &'a Value,
    }
    serde_json::to_vec(&Out {
        jsonrpc: "2.0",
        id,
        method,
        params,
    })
    .unwrap_or_default()
}

/// Insert `_meta[key] = value` into a JSON object, creating `_meta` when absent.
pub fn put_meta(obj: &mut Map<String, Value>, key: &str, value: Value) {
    let meta = obj
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    if let Value::Object(m) = meta {
        m.insert(key.to_string(), value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_requests_notifications_responses() {
        let m = parse_message(br#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#).unwrap();
        assert_eq!(
            m,
            Message::Request {
                id: RequestId::Number(7),
                method: "ping".into(),
                params: None
            }
        );
        let m =
            parse_message(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).unwrap();
        assert!(matches!(m, Message::Notification { .. }));
        let m = parse_message(br#"{"jsonrpc":"2.0","id":"x","result":{}}"#).unwrap();
        assert!(matches!(m, Message::Response { outcome: Ok(_), .. }));
        let m = parse_message(br#"{"jsonrpc":"2.0","id":"x","error":{"code":-1,"message":"no"}}"#)
            .unwrap();
        assert!(matches!(
            m,
            Message::Response {
                outcome: Err(_),
                ..
            }
        ));
    }

    #[test]
    fn rejects_bad_envelopes_with_the_right_code() {
        let code = |b: &[u8]| parse_message(b).unwrap_err().to_error().code;
        assert_eq!(code(b"{not json"), PARSE_ERROR);
        // Not UTF-8, anywhere in the body; a string escape that is not Unicode.
        assert_eq!(
            code(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}"),
            PARSE_ERROR
        );
        assert_eq!(
            code(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":{\"a\":\"\xc3\"}}"),
            PARSE_ERROR
        );
        assert_eq!(code(b"[\"\xfe\"]"), PARSE_ERROR);
        assert_eq!(
            code(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\\ud800\"}"),
            PARSE_ERROR
        );
        // JSON of the wrong shape stays an invalid request.
        assert_eq!(
            code(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":5}"),
            INVALID_REQUEST
        );
        assert_eq!(code(b""), PARSE_ERROR);
        assert_eq!(code(b"[1,2"), PARSE_ERROR);
        assert_eq!(
            code(br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#),
            INVALID_REQUEST
        );
        assert_eq!(code(br#"{"id":1,"method":"ping"}"#), INVALID_REQUEST);
        assert_eq!(
            code(br#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#),
            INVALID_REQUEST
        );
        assert_eq!(code(br#"{"jsonrpc":"2.0","id":1}"#), INVALID_REQUEST);
        assert_eq!(
            code(br#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#),
            INVALID_REQUEST
        );
        assert_eq!(
            code(br#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#),
            INVALID_REQUEST
        );
        assert_eq!(
            code(br#"{"jsonrpc":"2.0","id":1,"method":"x","params":3}"#),
            INVALID_REQUEST
        );
        assert_eq!(code(br#""hello""#), INVALID_REQUEST);
        assert_eq!(
            code(br#"{"jsonrpc":"2.0","id":1,"method":7}"#),
            INVALID_REQUEST
        );
    }

    #[test]
    fn a_number_out_of_range_is_invalid_params_naming_the_field_with_the_id() {
        let params = |body: &str| match parse_message(body.as_bytes()) {
            Err(e) => (e.to_error(), e.id().cloned()),
            Ok(m) => panic!("{body} parsed as {m:?}"),
        };
        let (e, id) = params(
            r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"t","task":{"ttl":1e400}}}"#,
        );
        assert_eq!(e.code, INVALID_PARAMS);
        assert!(e.message.contains("'task.ttl'"), "{e:?}");
        assert_eq!(id, Some(RequestId::Number(9)));
        // Wherever it is: a tool argument deep in arrays and objects, a negative one, the id
        // after the params.
        let (e, id) = params(
            r#"{"params":{"arguments":{"a":[0,{"b":-2.5e999}]}},"method":"tools/call","id":"x","jsonrpc":"2.0"}"#,
        );
        assert_eq!(e.code, INVALID_PARAMS);
        assert!(e.message.contains("'arguments.a[1].b'"), "{e:?}");
        assert_eq!(id, Some(RequestId::String("x".into())));
        // A notification has no id to answer with.
        let (e, id) = params(
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1E309}}"#,
        );
        assert_eq!(e.code, INVALID_PARAMS);
        assert!(e.message.contains("'requestId'"), "{e:?}");
        assert_eq!(id, None);
        // A long path is cut short.
        let key = "k".repeat(500);
        let (e, _) = params(&format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":{{"{key}":1e400}}}}"#
        ));
        assert!(e.message.len() < 300, "{e:?}");
        // Numbers at the edge of the range are read.
        let m = parse_message(
            br#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1.7976931348623157e308,"b":1e-400}}"#,
        )
        .unwrap();
        assert!(matches!(m, Message::Request { .. }));
    }

    #[test]
    fn the_envelope_is_checked_before_the_values() {
        let code = |b: &str| parse_message(b.as_bytes()).unwrap_err().to_error().code;
        let id = |b: &str| parse_message(b.as_bytes()).unwrap_err().id().cloned();
        for body in [
            r#"{"jsonrpc":"1.0","id":1,"method":"m","params":{"a":1e400}}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"m","params":{"a":1e400}}"#,
            r#"{"jsonrpc":"2.0","id":1,"params":{"a":1e400}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params":1e400}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"a":[1e400]}}"#,
        ] {
            assert_eq!(code(body), INVALID_REQUEST, "{body}");
            assert_eq!(id(body), None, "{body}");
        }
        // Not JSON stays a parse error, whatever numbers it holds; so does a string that is not
        // Unicode met before the number.
        for body in [
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1e400"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"b":"\ud800","a":1e400}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1e400,}}"#,
        ] {
            assert_eq!(code(body), PARSE_ERROR, "{body}");
        }
        // Nesting past the parser's limit stays a parse error too.
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":{{"a":{}1e400{}}}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        assert_eq!(code(&deep), PARSE_ERROR);
    }

    proptest::proptest! {
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
            let _ = parse_message(&bytes);
        }
    }
}
