//! The Redis store on its own: what claim, complete and release do, and what they leave in
//! Redis; then the layer over it.
//!
//! ```sh
//! SANGHO_STORE_URL=redis://127.0.0.1:6379 cargo run -p sangho-webhook-redis --example redis_store
//! ```

use std::time::Duration;

use sangho_webhook::{
    SanghoWebhookLayer,
    signature::Secret,
    store::{Claim, ClaimToken, Claimant, Completion, IdempotencyStore, Renewal},
};
use sangho_webhook_redis::{
    RedisStore,
    redis::{self, AsyncCommands},
};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("SANGHO_STORE_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    // Bounded connection and response timeouts: a dead Redis is an error within seconds.
    let store = RedisStore::connect(url.as_str())
        .await?
        .with_prefix("sangho:example:");
    let mut redis = store.connection().clone();
    let (lease, retention) = (Duration::from_secs(30), Duration::from_secs(60));
    let id = format!("evt_example_{}", std::process::id());
    let key = store.key(&id);
    const TYPE: &str = "payment_intent.succeeded";

    // The first delivery claims the event with the token the layer drew for it: the key holds
    // that token for the lease.
    let token = ClaimToken::generate();
    let Claim::Acquired = store.claim(Claimant::new(&id, TYPE, &token), lease).await? else {
        return Err("a fresh event is acquired".into());
    };
    show(&mut redis, &key, "after the claim").await?;

    // A concurrent delivery finds it in flight (the layer answers 409).
    let second = store
        .claim(Claimant::new(&id, TYPE, &ClaimToken::generate()), lease)
        .await?;
    println!("a second claim: {second:?}");

    // While the handler runs, the layer renews the claim: a new lease from now.
    assert_eq!(
        store.renew(Claimant::new(&id, TYPE, &token), lease).await?,
        Renewal::Held
    );

    // The handler succeeded: the key now says `completed:<token>`, for the retention.
    assert_eq!(
        store
            .complete(Claimant::new(&id, TYPE, &token), retention)
            .await?,
        Completion::Recorded
    );
    show(&mut redis, &key, "after complete").await?;

    // A redelivery is a duplicate (the layer answers 200 without calling the handler), and a
    // release by the former owner changes nothing.
    println!(
        "a redelivery: {:?}",
        store
            .claim(Claimant::new(&id, TYPE, &ClaimToken::generate()), lease)
            .await?
    );
    println!(
        "release after complete: {:?}",
        store.release(Claimant::new(&id, TYPE, &token)).await?
    );

    // A failed handler releases its claim: the key is gone and the next delivery processes it.
    let other = format!("{id}_failed");
    let token = ClaimToken::generate();
    if let Claim::Acquired = store
        .claim(Claimant::new(&other, "charge.failed", &token), lease)
        .await?
    {
        println!(
            "release by the owner: {:?}",
            store
                .release(Claimant::new(&other, "charge.failed", &token))
                .await?
        );
        show(&mut redis, &store.key(&other), "after release").await?;
    }

    let _: () = redis.del(&key).await?;

    // In a server, the store goes into the layer (clones share the connection).
    let secret = Secret::new(
        std::env::var("SANGHO_WEBHOOK_SECRET").unwrap_or_else(|_| "whsec_development_only".into()),
    )?;
    let layer = SanghoWebhookLayer::builder(secret, store)
        .with_lease(lease)
        .build()
        .expect("valid settings");
    println!("{layer:?}");
    Ok(())
}

async fn show(
    redis: &mut sangho_webhook_redis::HealingConnection,
    key: &str,
    when: &str,
) -> redis::RedisResult<()> {
    let value: Option<String> = redis.get(key).await?;
    let ttl: i64 = redis.pttl(key).await?;
    println!("{when}: {key} = {value:?}, expires in {ttl} ms");
    Ok(())
}
