//! Session ids, list cursors and `requestState` tokens are HMAC-signed: any string presented
//! as one is refused (no forgery verifies, nothing panics), and a signed value reads back as
//! it was signed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use taskmesh_gateway::session::SessionClaims;
use taskmesh_gateway::sign::Signer;

/// The domains tokens are signed for (the checks treat every one alike).
const DOMAINS: [&str; 3] = ["session", "cursor", "request-state"];

fuzz_target!(|data: &[u8]| {
    let signer = Signer::new(b"a key the fuzzer does not know, 32b");
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for domain in DOMAINS {
        assert!(signer.verify::<SessionClaims>(domain, text).is_none());
        assert!(signer.verify::<serde_json::Value>(domain, text).is_none());
    }
    // Signed by this server: reads back unchanged, and only in its own domain.
    let value = serde_json::Value::String(text.to_string());
    let token = signer.sign("cursor", &value);
    assert_eq!(
        signer.verify::<serde_json::Value>("cursor", &token),
        Some(value)
    );
    assert!(signer
        .verify::<serde_json::Value>("session", &token)
        .is_none());
});
