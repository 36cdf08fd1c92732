//! The owner-checked Lua scripts. Each reads and writes exactly one key, `KEYS[1]`, so each
//! is routed to the one node that owns it on Redis Cluster.

use std::sync::LazyLock;

use redis::Script;

/// The value of a completed event's key, as a literal for `concat!`.
macro_rules! completed {
    () => {
        "completed"
    };
}

/// The value of a completed event's key. A [`ClaimToken`](sangho_webhook::store::ClaimToken) is
/// 32 hex digits, so it is never mistaken for this marker.
pub(crate) const COMPLETED: &str = completed!();

/// `KEYS[1]` = the event's key, `ARGV[1]` = the owner's token, `ARGV[2]` = the retention in
/// milliseconds. Answers 1 when the token owned the claim (the event is now completed), else 0.
pub(crate) static COMPLETE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then\n",
        "  redis.call('SET', KEYS[1], '",
        completed!(),
        "', 'PX', ARGV[2])\n",
        "  return 1\n",
        "end\n",
        "return 0\n",
    ))
});

/// `KEYS[1]` = the event's key, `ARGV[1]` = the owner's token. Answers 1 when the token owned
/// the claim (the key is now deleted), else 0.
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then\n",
        "  return redis.call('DEL', KEYS[1])\n",
        "end\n",
        "return 0\n",
    ))
});
