//! `events/subscribe` and `events/unsubscribe` (the events extension's webhook mode, SEP-3415
//! draft) on protocol 2026-07-28: a client registers a webhook for the task events of its
//! principal.
//!
//! A subscription's identity is (principal, `delivery.url`, `name`, `arguments`), the
//! arguments compared as canonical JSON (object keys sorted); its id (`sub_` and 32 hex digits
//! of the SHA-256 of the identity) is the same on every refresh, on every node. It is written
//! to every shard through the shards' logs (`taskmesh_task::subscription`): replicated and
//! durable, known to every shard's leader, which delivers the events of its tasks. A
//! subscribe of an identity that is live is a refresh: the secret is replaced (the old one
//! still signs for `events.secret_grace_ms`), the life granted again, the subscription
//! reactivated. A new one is verified first, unless its URL is listed in
//! `events.verified_urls` or the node verified it for the same principal lately
//! (`events.verification_cache_ms`): a signed `{"type":"verification","challenge":...}` that
//! the endpoint must echo, at most `events.verifications_per_host_per_minute` to a host.
//!
//! Webhook mode needs an authenticated principal (`-32024` Forbidden otherwise). Errors are the
//! draft's, provisional: `-32602` for a bad URL, secret or argument, `-32023` for an unknown
//! event or subscription, `-32025` past `events.max_subscriptions_per_principal` or the
//! verifications a host may be sent, `-32026` for
//! a delivery mode other than `webhook`, `-32027` when verification fails (`data.reason`: the
//! category). A subscription is never replayed: its `cursor` is `null`.

use std::sync::Arc;

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use taskmesh_host::ops::{ReadSubscription, Subscribe, SubscriptionRead, Unsubscribe};
use taskmesh_host::outbox::{VerifyError, TASK_EVENT};
use taskmesh_mcp::jsonrpc::ErrorObject;
use taskmesh_task::Subscription;

use super::complete;
use super::events::{event_filter, NOT_FOUND};
use crate::Gateway;

/// The draft's `Forbidden` (provisional).
pub const FORBIDDEN: i64 = -32024;
/// The draft's `ResourceExhausted` (provisional).
pub const RESOURCE_EXHAUSTED: i64 = -32025;
/// The draft's `Unsupported` (provisional).
pub const UNSUPPORTED: i64 = -32026;
/// The draft's `CallbackEndpointError` (provisional).
pub const CALLBACK_ENDPOINT_ERROR: i64 = -32027;

/// A subscription's identity as a request names it.
struct Identity {
    id: String,
    url: String,
    task_id: Option<String>,
    terminal_only: bool,
}

fn forbidden_without_auth(gw: &Gateway) -> Result<(), ErrorObject> {
    if gw.has_auth() {
        return Ok(());
    }
    Err(ErrorObject {
        code: FORBIDDEN,
        message: "Forbidden: webhook subscriptions need an authenticated principal, and this server authenticates none".into(),
        data: Some(json!({"reason": "unauthenticated"})),
    })
}

/// The identity of the request's subscription: its event, arguments and URL.
fn identity(principal: &str, p: &Map<String, Value>) -> Result<Identity, ErrorObject> {
    let (task_id, terminal_only) = event_filter(p)?;
    let delivery = match p.get("delivery") {
        Some(Value::Object(d)) => d,
        _ => {
            return Err(ErrorObject::invalid_params(
                "Invalid params: 'delivery' must be an object with the webhook's 'url'",
            ))
        }
    };
    match delivery.get("mode") {
        None | Some(Value::Null) => {}
        Some(Value::String(m)) if m == "webhook" => {}
        Some(other) => {
            return Err(ErrorObject {
                code: UNSUPPORTED,
                message: format!("Unsupported: delivery mode {other}; events/subscribe serves webhook (poll with events/poll, push with events/stream)"),
                data: Some(json!({"feature": "deliveryMode", "value": other})),
            })
        }
    }
    let url = match delivery.get("url") {
        Some(Value::String(u)) if !u.is_empty() && u.len() <= 2_048 => u.clone(),
        _ => return Err(ErrorObject::invalid_params(
            "Invalid params: 'delivery.url' must be the webhook's URL (at most 2048 characters)",
        )),
    };
    let arguments = p.get("arguments").cloned().unwrap_or(json!({}));
    let mut key = Vec::new();
    for part in [principal, url.as_str(), TASK_EVENT, &canonical(&arguments)] {
        key.extend_from_slice(part.as_bytes());
        key.push(0);
    }
    let digest = Sha256::digest(&key);
    let id = format!(
        "sub_{}",
        digest[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    );
    Ok(Identity {
        id,
        url,
        task_id,
        terminal_only,
    })
}

/// A value as canonical JSON: object keys sorted, no spaces.
fn canonical(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let fields: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", Value::String(k.clone()), canonical(&m[k])))
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(canonical).collect::<Vec<_>>().join(",")
        ),
        other => other.to_string(),
    }
}

async fn read(
    gw: &Arc<Gateway>,
    principal: &str,
    id: &str,
) -> Result<SubscriptionRead, ErrorObject> {
    gw.router
        .run(ReadSubscription {
            shard: gw.router.shard_of(id),
            id: id.to_string(),
            principal: principal.to_string(),
        })
        .await
        .map_err(|e| crate::wire::host_error(&e))
}

/// `op(shard)` on the leader of every shard at once; their answers in shard order, or the
/// first error as a client sees it.
async fn on_every_shard<O: taskmesh_host::Operation>(
    gw: &Gateway,
    op: impl Fn(u32) -> O,
) -> Result<Vec<O::Output>, ErrorObject> {
    let runs = (0..gw.router.shard_count()).map(|shard| gw.router.run(op(shard)));
    futures::future::try_join_all(runs)
        .await
        .map_err(|e| crate::wire::host_error(&e))
}

/// `events/subscribe`: add or refresh the caller's webhook subscription (see the module doc).
pub(super) async fn subscribe(
    gw: &Arc<Gateway>,
    principal: &str,
    p: &Map<String, Value>,
) -> Result<Value, ErrorObject> {
    forbidden_without_auth(gw)?;
    let who = identity(principal, p)?;
    let settings = &gw.cfg.events;
    let secret_text = p
        .get("delivery")
        .and_then(|d| d.get("secret"))
        .and_then(Value::as_str)
        .ok_or_else(|| {
            ErrorObject::invalid_params("Invalid params: 'delivery.secret' must be a whsec_ secret")
        })?;
    let secret = taskmesh_webhook::Secret::parse(secret_text).map_err(|e| {
        ErrorObject::invalid_params(format!("Invalid params: 'delivery.secret': {e}"))
    })?;
    gw.router
        .host()
        .check_webhook_url(&who.url)
        .map_err(|e| ErrorObject::invalid_params(format!("Invalid params: 'delivery.url': {e}")))?;
    let ttl_ms = match p.get("ttlMs") {
        None => settings.subscription_ttl_ms,
        Some(Value::Null) => settings.max_subscription_ttl_ms,
        Some(v) => v
            .as_u64()
            .ok_or_else(|| {
                ErrorObject::invalid_params(
                    "Invalid params: 'ttlMs' must be a non-negative integer or null",
                )
            })?
            .clamp(
                settings.min_subscription_ttl_ms,
                settings.max_subscription_ttl_ms,
            ),
    };
    let now = taskmesh_mcp::time::now_ms();
    // Every shard's leader: the home shard's copy decides, and the status is every leader's.
    let all = on_every_shard(gw, |shard| ReadSubscription {
        shard,
        id: who.id.clone(),
        principal: principal.to_string(),
    })
    .await?;
    let deliveries = merged(
        all.iter()
            .filter_map(|r| r.state.as_ref().map(|s| &s.deliveries)),
    );
    let existing = all
        .into_iter()
        .nth(gw.router.shard_of(&who.id) as usize)
        .unwrap_or_default();
    let live = existing
        .state
        .as_ref()
        .map(|s| &s.subscription)
        .filter(|s| !s.lapsed(now));
    if live.is_none() {
        if existing.state.is_none()
            && existing.held >= settings.max_subscriptions_per_principal as u64
        {
            let max = settings.max_subscriptions_per_principal;
            return Err(ErrorObject {
                code: RESOURCE_EXHAUSTED,
                message: format!(
                    "Resource exhausted: a principal holds at most {max} webhook subscriptions"
                ),
                data: Some(json!({"limit": "subscriptions", "max": max})),
            });
        }
        let listed = settings
            .verified_urls
            .iter()
            .any(|u| who.url.starts_with(u));
        if !listed {
            let challenge =
                taskmesh_router::mint_task_id().map_err(|e| crate::wire::host_error(&e))?;
            let message_id = format!("msg_verification_{challenge}");
            let verified = gw
                .router
                .host()
                .verify_endpoint(
                    principal,
                    &who.url,
                    &taskmesh_webhook::Challenge {
                        message_id: &message_id,
                        subscription: &who.id,
                        secret: &secret,
                        challenge: &challenge,
                    },
                )
                .await;
            match verified {
                Ok(()) => {}
                Err(VerifyError::Failed(reason)) => {
                    return Err(ErrorObject {
                        code: CALLBACK_ENDPOINT_ERROR,
                        message: format!(
                            "Callback endpoint error: the webhook did not pass verification ({reason})"
                        ),
                        data: Some(json!({"reason": reason})),
                    });
                }
                Err(VerifyError::RateLimited { per_minute }) => {
                    return Err(ErrorObject {
                        code: RESOURCE_EXHAUSTED,
                        message: format!(
                            "Resource exhausted: at most {per_minute} endpoint verifications a minute to one host; try again later"
                        ),
                        data: Some(json!({"limit": "verifications", "max": per_minute})),
                    });
                }
            }
        }
    }
    let (previous_secret, previous_until_ms) = match live {
        Some(old) if old.secret != secret_text => (
            Some(old.secret.clone()),
            now.saturating_add(settings.secret_grace_ms),
        ),
        Some(old) => (old.previous_secret.clone(), old.previous_until_ms),
        None => (None, 0),
    };
    let subscription = Subscription {
        id: who.id.clone(),
        principal: principal.to_string(),
        url: who.url,
        secret: secret_text.to_string(),
        previous_secret,
        previous_until_ms,
        task_id: who.task_id,
        terminal_only: who.terminal_only,
        expires_at_ms: now.saturating_add(ttl_ms),
        refreshed_at_ms: now,
    };
    on_every_shard(gw, |shard| Subscribe {
        shard,
        subscription: subscription.clone(),
    })
    .await?;
    gw.router.host().reactivate(&subscription.id);
    let iso =
        |ms: Option<u64>| ms.map_or(Value::Null, |m| json!(taskmesh_mcp::time::rfc3339_ms(m)));
    let mut status = Map::new();
    // A refresh reactivates: what was suspended is active again.
    status.insert("active".into(), json!(true));
    status.insert("lastDeliveryAt".into(), iso(deliveries.last_delivery_at_ms));
    status.insert("lastError".into(), json!(deliveries.last_error));
    if let Some(since) = deliveries.failing_since_ms {
        status.insert("failedSince".into(), iso(Some(since)));
    }
    Ok(complete(Map::from_iter([
        ("id".to_string(), json!(subscription.id)),
        (
            "refreshBefore".to_string(),
            json!(taskmesh_mcp::time::rfc3339_ms(subscription.expires_at_ms)),
        ),
        ("cursor".to_string(), Value::Null),
        ("truncated".to_string(), json!(false)),
        ("deliveryStatus".to_string(), Value::Object(status)),
    ])))
}

/// The deliveries of every shard's leader to one subscription, as one status: the latest
/// acknowledgment; while some fail, the error of the one failing longest and since when.
fn merged<'a>(
    each: impl Iterator<Item = &'a taskmesh_host::outbox::DeliveryStats>,
) -> taskmesh_host::outbox::DeliveryStats {
    let mut m = taskmesh_host::outbox::DeliveryStats::default();
    for d in each {
        m.last_delivery_at_ms = m.last_delivery_at_ms.max(d.last_delivery_at_ms);
        if let Some(since) = d.failing_since_ms {
            if m.failing_since_ms.is_none_or(|s| since < s) {
                m.failing_since_ms = Some(since);
                m.last_error = d.last_error;
            }
        }
    }
    m
}

/// `events/unsubscribe`: remove the caller's subscription of that identity from every shard.
pub(super) async fn unsubscribe(
    gw: &Arc<Gateway>,
    principal: &str,
    p: &Map<String, Value>,
) -> Result<Value, ErrorObject> {
    forbidden_without_auth(gw)?;
    let who = identity(principal, p)?;
    if read(gw, principal, &who.id).await?.state.is_none() {
        return Err(ErrorObject {
            code: NOT_FOUND,
            message:
                "Not found: no subscription of this principal has that name, arguments and URL"
                    .into(),
            data: Some(json!({"kind": "subscription"})),
        });
    }
    on_every_shard(gw, |shard| Unsubscribe {
        shard,
        ids: vec![who.id.clone()],
    })
    .await?;
    Ok(complete(Map::new()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_is_canonical_and_stable() {
        assert_eq!(
            canonical(&json!({"b": [1, {"d": 1, "c": "x"}], "a": null})),
            r#"{"a":null,"b":[1,{"c":"x","d":1}]}"#
        );
        let p = |args: Value| {
            json!({"name": TASK_EVENT, "arguments": args, "delivery": {"url": "https://h.example.com/x"}})
                .as_object()
                .cloned()
                .unwrap()
        };
        let a = identity("alice", &p(json!({"terminalOnly": true, "taskId": "t"}))).unwrap();
        let b = identity("alice", &p(json!({"taskId": "t", "terminalOnly": true}))).unwrap();
        assert_eq!(a.id, b.id, "key order does not matter");
        assert!(a.id.starts_with("sub_") && a.id.len() == 36, "{}", a.id);
        assert_ne!(
            identity("bob", &p(json!({"taskId": "t", "terminalOnly": true})))
                .unwrap()
                .id,
            a.id
        );
        assert_ne!(identity("alice", &p(json!({}))).unwrap().id, a.id);
        let mode = json!({"name": TASK_EVENT, "delivery": {"mode": "push", "url": "https://h.example.com/"}});
        let e = identity("alice", mode.as_object().unwrap()).err().unwrap();
        assert_eq!(e.code, UNSUPPORTED);
    }
}
