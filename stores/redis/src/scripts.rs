//! The owner-checked Lua scripts. Each reads and writes exactly one key, `KEYS[1]`, so each
//! is routed to the one node that owns it on Redis Cluster.
//!
//! A key holds either the owner's token (in flight) or `completed:` followed by the token that
//! completed the event. Every script takes `ARGV[1]` = the caller's token.

use std::sync::LazyLock;

use redis::Script;

/// The start of a completed event's value, as a literal for `concat!`.
macro_rules! completed {
    () => {
        "completed:"
    };
}

/// The start of a completed event's value; the completing token follows. A
/// [`ClaimToken`](sangho_webhook::store::ClaimToken) is 32 hex digits, so an in-flight value
/// never starts with it.
pub(crate) const COMPLETED_PREFIX: &str = completed!();

/// Whether a key's value says the event is completed (`completed:<token>`; a bare `completed`
/// is accepted too).
pub(crate) fn is_completed(value: &[u8]) -> bool {
    value.starts_with(COMPLETED_PREFIX.trim_end_matches(':').as_bytes())
}

/// `ARGV[2]` = the lease in milliseconds. The token's live claim gets a new lease (`PEXPIRE`);
/// an absent key (expired, evicted, lost) is recorded again for the token; a completion by
/// the token is left alone. Answers 1 in those cases, 0 when another owner holds or completed
/// the event.
pub(crate) static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        "local value = redis.call('GET', KEYS[1])\n",
        "if value == ARGV[1] then\n",
        "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n",
        "  return 1\n",
        "end\n",
        "if value == false then\n",
        "  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])\n",
        "  return 1\n",
        "end\n",
        "if value == '",
        completed!(),
        "' .. ARGV[1] then\n",
        "  return 1\n",
        "end\n",
        "return 0\n",
    ))
});

/// `ARGV[2]` = the retention in milliseconds. Unless another owner holds or completed the
/// event, records it as completed by the token for the retention and answers 1; else 0.
pub(crate) static COMPLETE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        "local value = redis.call('GET', KEYS[1])\n",
        "local completed = '",
        completed!(),
        "' .. ARGV[1]\n",
        "if value == false or value == ARGV[1] or value == completed then\n",
        "  redis.call('SET', KEYS[1], completed, 'PX', ARGV[2])\n",
        "  return 1\n",
        "end\n",
        "return 0\n",
    ))
});

/// Deletes the key when it holds the token's in-flight claim and answers 1; else 0.
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then\n",
        "  return redis.call('DEL', KEYS[1])\n",
        "end\n",
        "return 0\n",
    ))
});
