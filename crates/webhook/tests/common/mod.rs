//! What the webhook client's test binaries share: secrets and one attempt of an empty event.

use base64::Engine as _;
use taskmesh_webhook::{Attempt, Failure, Message, Secret, Sender};

/// A `whsec_` secret of 32 bytes of `byte`.
pub fn secret(byte: u8) -> Secret {
    let key = base64::engine::general_purpose::STANDARD.encode([byte; 32]);
    let Ok(s) = Secret::parse(&format!("whsec_{key}")) else {
        panic!("a secret of 32 bytes is refused");
    };
    s
}

/// One attempt of an empty event to `url`, signed with `s`: refused as a URL by the policy
/// as the delivery loop does, or sent.
pub async fn send(sender: &Sender, url: &str, s: &Secret) -> Attempt {
    let to = match sender.policy().check_url(url) {
        Ok(to) => to,
        Err(e) => return Attempt::Failed(Failure::Egress(e)),
    };
    sender
        .send(Message {
            to: &to,
            id: "m",
            subscription: "sub",
            body: b"{}",
            secrets: &[s],
        })
        .await
}
