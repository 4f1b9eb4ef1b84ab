//! HMAC-SHA256 signed tokens: session ids and list cursors.
//!
//! A token is `base64url(payload) "." base64url(mac)`. Any node holding the same secret can
//! check one without shared state; a token that was altered, forged or cut fails the check.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde::de::DeserializeOwned;
use serde::Serialize;
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Signs and checks tokens with HMAC-SHA256 under one secret key.
#[derive(Clone)]
pub struct Signer {
    key: Vec<u8>,
}

impl Signer {
    /// A signer keyed with `key` (HMAC takes a key of any length).
    pub fn new(key: &[u8]) -> Self {
        Self { key: key.to_vec() }
    }

    fn mac(&self, domain: &str, payload: &[u8]) -> HmacSha256 {
        // Infallible: HMAC accepts keys of any length.
        let mut m =
            <HmacSha256 as Mac>::new_from_slice(&self.key).unwrap_or_else(|_| unreachable!());
        m.update(domain.as_bytes());
        m.update(&[0]);
        m.update(payload);
        m
    }

    /// Sign `value` for `domain` (a session id cannot be replayed as a cursor, or vice versa).
    pub fn sign<T: Serialize>(&self, domain: &str, value: &T) -> String {
        let payload = serde_json::to_vec(value).unwrap_or_default();
        let tag = self.mac(domain, &payload).finalize().into_bytes();
        format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(&payload),
            URL_SAFE_NO_PAD.encode(tag)
        )
    }

    /// The signed value, or `None` when the token is malformed or its signature is wrong.
    pub fn verify<T: DeserializeOwned>(&self, domain: &str, token: &str) -> Option<T> {
        let (p, t) = token.split_once('.')?;
        let payload = URL_SAFE_NO_PAD.decode(p).ok()?;
        let tag = URL_SAFE_NO_PAD.decode(t).ok()?;
        self.mac(domain, &payload).verify_slice(&tag).ok()?;
        serde_json::from_slice(&payload).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_tamper_detection() {
        let s = Signer::new(b"k1");
        let tok = s.sign("cursor", &("alice", 5));
        assert_eq!(
            s.verify::<(String, u32)>("cursor", &tok),
            Some(("alice".into(), 5))
        );
        assert_eq!(s.verify::<(String, u32)>("session", &tok), None);
        assert_eq!(
            Signer::new(b"k2").verify::<(String, u32)>("cursor", &tok),
            None
        );
        let mut bad = tok.clone();
        bad.insert(1, 'x');
        assert_eq!(s.verify::<(String, u32)>("cursor", &bad), None);
        assert_eq!(s.verify::<(String, u32)>("cursor", "garbage"), None);
    }
}
