//! Secrets and signatures of the Standard Webhooks profile: a secret is `whsec_` and the
//! base64 of 24 to 64 random bytes; a message is signed with HMAC-SHA256 under those bytes over
//! `{webhook-id}.{webhook-timestamp}.{raw body}`, and the signature header carries
//! `v1,{base64 of the MAC}`, several separated by spaces while a secret is being replaced.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The prefix of a secret's text form.
pub const SECRET_PREFIX: &str = "whsec_";
/// The fewest key bytes a secret may have.
pub const MIN_SECRET_BYTES: usize = 24;
/// The most key bytes a secret may have.
pub const MAX_SECRET_BYTES: usize = 64;

/// A signing secret. Its text is never shown: `Debug` prints only its length.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    key: Vec<u8>,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({} bytes)", self.key.len())
    }
}

/// Why a secret's text was refused; the text itself is never repeated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// It does not start with `whsec_`.
    #[error("a webhook secret starts with \"whsec_\"")]
    Prefix,
    /// What follows the prefix is not standard base64.
    #[error("a webhook secret is \"whsec_\" followed by standard base64")]
    Base64,
    /// The key is shorter or longer than allowed.
    #[error("a webhook secret's key has {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes, not {0}")]
    Length(usize),
}

impl Secret {
    /// A secret from its text form, `whsec_` and the base64 of 24 to 64 bytes.
    pub fn parse(text: &str) -> Result<Self, SecretError> {
        let encoded = text
            .strip_prefix(SECRET_PREFIX)
            .ok_or(SecretError::Prefix)?;
        let key = STANDARD
            .decode(encoded.trim())
            .map_err(|_| SecretError::Base64)?;
        if !(MIN_SECRET_BYTES..=MAX_SECRET_BYTES).contains(&key.len()) {
            return Err(SecretError::Length(key.len()));
        }
        Ok(Self { key })
    }

    /// The `v1,{base64}` signature of a message with this id, timestamp (Unix seconds) and
    /// raw body.
    pub fn sign(&self, id: &str, timestamp: u64, body: &[u8]) -> String {
        // HMAC takes keys of any length; the length was checked when the secret was made.
        #[allow(clippy::expect_used)]
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes any key");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
    }
}

/// The `webhook-signature` header's value: the message signed with each secret, separated by
/// spaces (the current secret first, then any that a rotation still honours).
pub fn signature_header(secrets: &[&Secret], id: &str, timestamp: u64, body: &[u8]) -> String {
    secrets
        .iter()
        .map(|s| s.sign(id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_checked_and_never_shown() {
        let key = STANDARD.encode([7u8; 32]);
        let s = Secret::parse(&format!("whsec_{key}")).unwrap();
        assert_eq!(format!("{s:?}"), "Secret(32 bytes)");
        assert_eq!(Secret::parse(&key), Err(SecretError::Prefix));
        assert_eq!(Secret::parse("whsec_!!!"), Err(SecretError::Base64));
        let short = STANDARD.encode([1u8; 23]);
        assert_eq!(
            Secret::parse(&format!("whsec_{short}")),
            Err(SecretError::Length(23))
        );
        let long = STANDARD.encode([1u8; 65]);
        assert_eq!(
            Secret::parse(&format!("whsec_{long}")),
            Err(SecretError::Length(65))
        );
        let error = Secret::parse(&format!("whsec_{short}")).unwrap_err();
        assert!(!error.to_string().contains(&short));
    }

    #[test]
    fn the_signature_is_hmac_sha256_over_id_timestamp_and_body() {
        // Known answer: key 24 bytes 0x01..=0x18, id "msg_1", timestamp 1700000000, body
        // {"a":1}, its HMAC-SHA256 computed with Python's hmac module.
        let key: Vec<u8> = (1u8..=24).collect();
        let s = Secret::parse(&format!("whsec_{}", STANDARD.encode(&key))).unwrap();
        let sig = s.sign("msg_1", 1_700_000_000, br#"{"a":1}"#);
        assert_eq!(sig, "v1,/+qPlAq2aQuk0ezu+sxJUrMSs8X7in8NiT3fduWIvv8=");
        // A different body, id or timestamp gives a different signature.
        assert_ne!(sig, s.sign("msg_1", 1_700_000_000, br#"{"a":2}"#));
        assert_ne!(sig, s.sign("msg_2", 1_700_000_000, br#"{"a":1}"#));
        assert_ne!(sig, s.sign("msg_1", 1_700_000_001, br#"{"a":1}"#));
        let other = Secret::parse(&format!("whsec_{}", STANDARD.encode([9u8; 24]))).unwrap();
        let both = signature_header(&[&s, &other], "msg_1", 1_700_000_000, br#"{"a":1}"#);
        let parts: Vec<&str> = both.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0], sig);
    }
}
