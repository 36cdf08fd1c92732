//! At connect, the store refuses a server that may evict its keys, unless told to accept it,
//! and accepts a server that does not let it read the policy. Each test starts its own
//! `redis-server` on a free loopback port.

mod common;

use common::RedisServer;
use sangho_webhook_redis::{ConnectError, RedisStore};

async fn connect(server: &RedisServer) -> Result<RedisStore, ConnectError> {
    RedisStore::connect(server.url()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a redis-server binary (/usr/bin/redis-server or SANGHO_TEST_REDIS_SERVER): run with --include-ignored"]
async fn an_evicting_policy_is_refused_at_connect() {
    for policy in ["allkeys-lru", "volatile-ttl"] {
        let server = RedisServer::start_with(&["--save", "", "--maxmemory-policy", policy]).await;
        let error = connect(&server)
            .await
            .expect_err("a server that evicts keys is refused");
        match &error {
            ConnectError::EvictingPolicy { policy: found } => assert_eq!(found, policy),
            other => panic!("expected EvictingPolicy, got {other:?}"),
        }
        let message = error.to_string();
        assert!(
            message.contains(policy) && message.contains("noeviction"),
            "the error names the policy and the fix: {message}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a redis-server binary (/usr/bin/redis-server or SANGHO_TEST_REDIS_SERVER): run with --include-ignored"]
async fn an_evicting_policy_is_accepted_when_allowed() {
    let server =
        RedisServer::start_with(&["--save", "", "--maxmemory-policy", "allkeys-lru"]).await;
    RedisStore::options()
        .allow_evicting_policy()
        .connect(server.url())
        .await
        .expect("accepted when allowed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a redis-server binary (/usr/bin/redis-server or SANGHO_TEST_REDIS_SERVER): run with --include-ignored"]
async fn noeviction_is_accepted() {
    let server = RedisServer::start_with(&["--save", "", "--maxmemory-policy", "noeviction"]).await;
    connect(&server).await.expect("noeviction is accepted");
}

/// Managed services often disable `CONFIG`: the store cannot check, warns, and connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a redis-server binary (/usr/bin/redis-server or SANGHO_TEST_REDIS_SERVER): run with --include-ignored"]
async fn a_server_without_config_is_accepted() {
    let server = RedisServer::start_with(&[
        "--save",
        "",
        "--maxmemory-policy",
        "allkeys-lru",
        "--rename-command",
        "CONFIG",
        "",
    ])
    .await;
    connect(&server)
        .await
        .expect("a server that hides its policy is accepted (with a warning)");
}
