//! A body that is JSON but holds a value that cannot be built: a number beyond the range of a
//! double, such as `1e400`. JSON allows it; serde_json refuses to build it, so the whole body
//! would read as a parse error without an id. Instead the message is read again with its
//! `params`, `result` and `error` kept as raw text (skipping a value checks its syntax without
//! computing its numbers), and the value that cannot be read is walked to, so the answer can
//! name its field and carry the request's id.
//!
//! Only taken after the ordinary parse failed: a well-formed request is read once.

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::{envelope_id, EnvelopeError, RawEnvelope};

/// Longest field path an error names; a longer one is cut short.
const MAX_PATH_CHARS: usize = 200;

/// Why `body` (whose ordinary parse failed) is not a usable message, when the reason is a value
/// that cannot be built inside a message that is otherwise well formed; `None` when the body is
/// not JSON at all (its parse error stands).
pub(super) fn unreadable(body: &[u8]) -> Option<EnvelopeError> {
    let env: RawEnvelope<'_, &RawValue> = serde_json::from_slice(body).ok()?;
    let id = match envelope_id(env.jsonrpc, env.id) {
        Ok(id) => id,
        Err(e) => return Some(e),
    };
    if let Some(params) = env.params {
        if !params.get().starts_with(['{', '[']) {
            return Some(EnvelopeError::Invalid(
                "\"params\" must be an object or an array".into(),
            ));
        }
        if let Some(path) = out_of_range(params) {
            let message = format!("'{path}' is a number out of range");
            return Some(match (env.method, id) {
                (Some(_), Some(Some(id))) => EnvelopeError::Params {
                    id: Some(id),
                    message,
                },
                (Some(_), None) => EnvelopeError::Params { id: None, message },
                (Some(_), Some(None)) => {
                    EnvelopeError::Invalid("request id must not be null".into())
                }
                (None, _) => EnvelopeError::Invalid("missing \"method\"".into()),
            });
        }
    }
    for (name, value) in [("result", env.result), ("error", env.error)] {
        if let Some(path) = value.and_then(out_of_range) {
            return Some(EnvelopeError::Invalid(format!(
                "'{name}.{path}' is a number out of range"
            )));
        }
    }
    None
}

/// The path (`task.ttl`, `arguments.items[2]`) of the first number in `value` that is out of
/// range, if that is what keeps it from being read.
fn out_of_range(value: &RawValue) -> Option<String> {
    let mut path = Vec::new();
    let mut de = serde_json::Deserializer::from_str(value.get());
    let e = Walk { path: &mut path }.deserialize(&mut de).err()?;
    // The walk fails where the value cannot be built, the path up to it still pushed. Any
    // other failure (nesting past serde_json's limit, an escape that is not Unicode) is the
    // parse error it was.
    if !e.to_string().starts_with("number out of range") {
        return None;
    }
    let mut text = String::new();
    for segment in path {
        match segment {
            Segment::Key(k) if text.is_empty() => text.push_str(&k),
            Segment::Key(k) => {
                text.push('.');
                text.push_str(&k);
            }
            Segment::Index(i) => text.push_str(&format!("[{i}]")),
        }
        if text.chars().count() > MAX_PATH_CHARS {
            text = text.chars().take(MAX_PATH_CHARS).collect();
            text.push('…');
            break;
        }
    }
    Some(text)
}

/// One step of a path into a JSON value.
enum Segment {
    Key(String),
    Index(usize),
}

/// Reads a value through, recording the path to where it is: on a failure the path to the
/// value that failed is left in `path`.
struct Walk<'p> {
    path: &'p mut Vec<Segment>,
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let path = self.path;
        let mut i = 0;
        loop {
            path.push(Segment::Index(i));
            if seq.next_element_seed(Walk { path: &mut *path })?.is_none() {
                path.pop();
                return Ok(());
            }
            path.pop();
            i += 1;
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let path = self.path;
        while let Some(key) = map.next_key::<String>()? {
            path.push(Segment::Key(key));
            map.next_value_seed(Walk { path: &mut *path })?;
            path.pop();
        }
        Ok(())
    }
}
