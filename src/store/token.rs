//! [`ClaimToken`]: who owns a claim.

use std::{
    fmt,
    sync::{
        LazyLock,
        atomic::{AtomicU64, Ordering},
    },
};

/// The owner of a claim: the layer draws a fresh token for every delivery and hands it to
/// every store operation on that delivery's claim.
///
/// Stores persist its [`as_str`](ClaimToken::as_str) form (32 lowercase hex digits) next to
/// the claim and compare it in `renew`, `complete` and `release`. A token is unique across
/// processes: 64 random bits drawn once per process, followed by a 64-bit sequence number, so
/// no system call is made per delivery. It identifies an owner; it is not a secret and never
/// leaves the server.
///
/// ```
/// use sangho_webhook::store::ClaimToken;
///
/// let token = ClaimToken::generate();
/// assert_eq!(token.as_str().len(), 32);
/// assert_ne!(token, ClaimToken::generate());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClaimToken {
    /// Lowercase hex digits: the process nonce, then the sequence number.
    hex: [u8; 32],
    /// The sequence number, as a number.
    sequence: u64,
}

impl ClaimToken {
    /// A fresh token, never generated before by this or (with overwhelming probability) any
    /// other process.
    pub fn generate() -> Self {
        static PROCESS: LazyLock<u64> = LazyLock::new(process_nonce);
        static SEQUENCE: AtomicU64 = AtomicU64::new(0);
        let sequence = SEQUENCE.fetch_add(1, Ordering::Relaxed);
        let value = (u128::from(*PROCESS) << 64) | u128::from(sequence);
        let mut hex = [0u8; 32];
        base16ct::lower::encode(&value.to_be_bytes(), &mut hex)
            .expect("32 digits hold the 16 bytes of a token");
        Self { hex, sequence }
    }

    /// The token's sequence number: what tells apart the tokens of this process (they all
    /// share its process part). Enough for an in-process store to tell owners apart, because
    /// [`generate`](Self::generate) is the only way to make a token: `MokaStore` keeps only
    /// this, so a way to build a token from elsewhere would have to change it too.
    pub(crate) fn sequence(self) -> u64 {
        self.sequence
    }

    /// The token as text (32 lowercase hex digits), for storing it.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.hex).expect("a token is ASCII hex")
    }
}

/// 64 random bits for this process; the clock and the process id if the system's random
/// source fails (it does not, on any supported platform).
fn process_nonce() -> u64 {
    getrandom::u64().unwrap_or_else(|_| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos() as u64);
        nanos ^ (u64::from(std::process::id()) << 32)
    })
}

impl fmt::Debug for ClaimToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ClaimToken").field(&self.as_str()).finish()
    }
}

impl fmt::Display for ClaimToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_distinct_hex_and_share_the_process_prefix() {
        let (first, second) = (ClaimToken::generate(), ClaimToken::generate());
        assert_ne!(first, second);
        assert!(first.as_str().bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(first.as_str()[..16], second.as_str()[..16]);
        assert_eq!(second.sequence(), first.sequence() + 1);
        assert_eq!(format!("{:016x}", second.sequence()), second.as_str()[16..]);
    }
}
