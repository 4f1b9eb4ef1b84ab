//! Webhook delivery on the Standard Webhooks profile, as the events extension's webhook mode
//! uses it: signing secrets and signatures ([`sign`]), where a webhook may be sent
//! ([`egress`]: https to globally routable addresses, checked when connecting), and one signed
//! delivery attempt with its outcome in the categories a subscription's status shows
//! ([`send`]). What to deliver, when to retry and what to record are the caller's.

mod client;
pub mod egress;
pub mod send;
pub mod sign;

pub use egress::{is_global, Cidr, EgressError, EgressPolicy, Endpoint};
pub use send::{Attempt, Challenge, Failure, Message, Sender};
pub use sign::{signature_header, Secret, SecretError};
