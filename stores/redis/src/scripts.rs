//! The three Lua scripts. Each reads and writes exactly one key, `KEYS[1]`, so each is routed
//! to the one node that owns it on Redis Cluster.

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

/// [`CLAIM`]'s answer: the new owner's token was stored.
pub(crate) const ACQUIRED: i64 = 0;
/// [`CLAIM`]'s answer: the key holds [`COMPLETED`].
pub(crate) const COMPLETED_REPLY: i64 = 1;
/// [`CLAIM`]'s answer: the key holds another owner's token.
pub(crate) const IN_FLIGHT: i64 = 2;

/// `KEYS[1]` = the event's key, `ARGV[1]` = the new owner's token, `ARGV[2]` = the lease in
/// milliseconds. Answers [`ACQUIRED`], [`COMPLETED_REPLY`] or [`IN_FLIGHT`].
///
/// Inside a script, key expiry is judged at the script's start, so the `GET` sees the key that
/// made the `SET NX` fail.
pub(crate) static CLAIM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end\n",
        "if redis.call('GET', KEYS[1]) == '",
        completed!(),
        "' then return 1 end\n",
        "return 2\n",
    ))
});

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
