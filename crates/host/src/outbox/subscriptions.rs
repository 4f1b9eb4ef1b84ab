//! Clients' webhook subscriptions as operations on a shard's leader: add or refresh one,
//! remove some (each written to every shard by the gateway), and read one with this node's
//! deliveries to it.

use taskmesh_task::{Applied, Command, Subscription};

use super::{DeliveryStats, VerifyError};
use crate::ops::{ReadSubscription, Subscribe, Unsubscribe};
use crate::{Host, HostError};

/// A subscription as its shard holds it, with what this node's deliveries to it came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionState {
    /// The subscription.
    pub subscription: Subscription,
    /// This node's deliveries to it (the leader of the shard asked).
    pub deliveries: DeliveryStats,
}

/// What [`ReadSubscription`] answers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubscriptionRead {
    /// The subscription, when the shard holds it.
    pub state: Option<SubscriptionState>,
    /// How many subscriptions the shard holds of the principal asked about, lapsed ones
    /// included.
    pub held: u64,
}

impl Host {
    /// Write `op.subscription` to its shard, through the log; the number of the shard's tasks
    /// it started watching.
    pub(crate) async fn add_subscription(&self, op: Subscribe) -> Result<usize, HostError> {
        let shard = self.shard(op.shard)?;
        match shard
            .propose(Command::Subscribe {
                subscription: op.subscription,
            })
            .await
            .map_err(|e| HostError::from_shard(op.shard, e))?
        {
            Applied::Subscribed { watching, .. } => Ok(watching),
            other => Err(HostError::Internal(format!(
                "a subscribe was applied as {other:?}"
            ))),
        }
    }

    /// Remove `op.ids` from their shard, through the log.
    pub(crate) async fn remove_subscriptions(&self, op: Unsubscribe) -> Result<(), HostError> {
        let shard = self.shard(op.shard)?;
        shard
            .propose(Command::Unsubscribe { ids: op.ids })
            .await
            .map_err(|e| HostError::from_shard(op.shard, e))?;
        Ok(())
    }

    /// Subscription `op.id` as the shard holds it (lapsed ones too), read on its leader.
    pub(crate) async fn read_subscription(
        &self,
        op: ReadSubscription,
    ) -> Result<SubscriptionRead, HostError> {
        let shard = self.shard(op.shard)?;
        let (sub, held) = shard
            .read(|s| {
                let held = s
                    .subscriptions()
                    .filter(|sub| sub.principal == op.principal)
                    .count();
                (s.subscription(&op.id).cloned(), held as u64)
            })
            .await
            .map_err(|e| HostError::from_shard(op.shard, e))?;
        Ok(SubscriptionRead {
            state: sub.map(|subscription| SubscriptionState {
                deliveries: self
                    .inner
                    .delivery
                    .as_ref()
                    .map(|d| d.stats_of(&subscription.id))
                    .unwrap_or_default(),
                subscription,
            }),
            held,
        })
    }

    /// Check that `url` answers endpoint verification for `principal` (see
    /// [`taskmesh_webhook::Sender::verify`]), unless it passed for that principal lately on
    /// this node, within the rate of verifications to its host.
    pub async fn verify_endpoint(
        &self,
        principal: &str,
        url: &str,
        challenge: &taskmesh_webhook::Challenge<'_>,
    ) -> Result<(), VerifyError> {
        let Some(d) = &self.inner.delivery else {
            return Err(VerifyError::Failed("connection_refused"));
        };
        let to =
            d.sender.policy().check_url(url).map_err(|e| {
                VerifyError::Failed(taskmesh_webhook::Failure::Egress(e).category())
            })?;
        d.verifier
            .verify(&d.sender, principal, &to, challenge)
            .await
    }

    /// Whether `url` may be sent to at all (scheme, host, credentials), before any resolution.
    pub fn check_webhook_url(&self, url: &str) -> Result<(), String> {
        match &self.inner.delivery {
            Some(d) => d
                .sender
                .policy()
                .check_url(url)
                .map(|_| ())
                .map_err(|e| e.to_string()),
            None => Err("webhooks cannot be sent from this node".into()),
        }
    }

    /// A refresh reactivates a subscription: this node stops suspending it.
    pub fn reactivate(&self, subscription: &str) {
        if let Some(d) = &self.inner.delivery {
            d.reactivate(subscription);
        }
    }
}
