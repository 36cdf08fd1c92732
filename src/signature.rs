//! The `Sangho-Signature` header: secrets, parsing, verification and signing.
//!
//! The header reads `t=<unix seconds>,v1=<hex>[,v1=<hex>…]`. Each `v1` is the lowercase hex of
//! `HMAC-SHA256(key = secret, message = "<t>.<raw body>")`, where `<t>` is the timestamp exactly
//! as it appears in the header. Several `v1` entries appear while the provider rotates a secret;
//! other schemes (`v0=…`) are ignored.
//!
//! ```
//! use sangho_webhook::signature::{verify, Secret};
//! use std::time::{Duration, UNIX_EPOCH};
//!
//! let secret = Secret::new("whsec_test_secret").unwrap();
//! let body = br#"{"id":"evt_test_webhook","object":"event"}"#;
//! let header = secret.sign(1_700_000_000, body);
//! assert_eq!(
//!     header,
//!     "t=1700000000,v1=d95c6b7477fbd7e9f90b1b0ef5f9c7ac25abca5382460e0d988c2b2a5b71b990",
//! );
//!
//! let now = UNIX_EPOCH + Duration::from_secs(1_700_000_100);
//! assert!(verify(&header, body, &[secret], now, Duration::from_secs(300)).is_ok());
//! ```

use std::{
    fmt,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// The length of a `v1` signature: 32 bytes as lowercase hex.
const V1_HEX_LEN: usize = 64;

/// An endpoint secret, exactly as the provider shows it (the `whsec_` prefix included: the key
/// is the secret's UTF-8 bytes).
///
/// Its `Debug` output is redacted, so it never reaches a log by accident. The HMAC key schedule
/// is computed once, here, not per request.
///
/// ```
/// use sangho_webhook::signature::Secret;
///
/// let secret = Secret::new("whsec_test_secret").unwrap();
/// assert_eq!(format!("{secret:?}"), "Secret(<redacted>)");
/// assert!(Secret::new("").is_err());
/// ```
#[derive(Clone)]
pub struct Secret {
    keyed: HmacSha256,
}

/// Why [`Secret::new`] refused a secret. The message never contains the secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SecretError {
    /// The secret is empty: anybody could sign with it.
    #[error("a webhook secret must not be empty")]
    Empty,
    /// The secret starts or ends with whitespace, most often a trailing newline read from a
    /// file or a mounted variable. The provider signs without it, so every delivery would fail
    /// verification.
    #[error(
        "the webhook secret starts or ends with whitespace (a trailing newline from a file?); \
         the provider's secret has none: trim it"
    )]
    SurroundingWhitespace,
}

impl Secret {
    /// A secret from its text (or bytes), exactly as the provider shows it.
    ///
    /// # Errors
    ///
    /// [`SecretError`] when the secret is empty or starts or ends with whitespace.
    ///
    /// ```
    /// use sangho_webhook::signature::{Secret, SecretError};
    ///
    /// assert_eq!(Secret::new("whsec_abc\n").unwrap_err(), SecretError::SurroundingWhitespace);
    /// ```
    pub fn new(secret: impl AsRef<[u8]>) -> Result<Self, SecretError> {
        let key = secret.as_ref();
        let (Some(first), Some(last)) = (key.first(), key.last()) else {
            return Err(SecretError::Empty);
        };
        if first.is_ascii_whitespace() || last.is_ascii_whitespace() {
            return Err(SecretError::SurroundingWhitespace);
        }
        let keyed = HmacSha256::new_from_slice(key).map_err(|_| SecretError::Empty)?;
        Ok(Self { keyed })
    }

    /// The MAC of `"<timestamp>.<body>"`, ready to finalize or verify.
    fn mac(&self, timestamp: &str, body: &[u8]) -> HmacSha256 {
        let mut mac = self.keyed.clone();
        mac.update(timestamp.as_bytes());
        mac.update(b".");
        mac.update(body);
        mac
    }

    /// Signs `body` as the provider does, and answers the whole `Sangho-Signature` header value
    /// (`t=<timestamp>,v1=<hex>`). For tests, fixtures and senders of your own.
    ///
    /// ```
    /// use sangho_webhook::signature::Secret;
    ///
    /// let header = Secret::new("whsec_test_secret").unwrap().sign(1_700_000_000, b"");
    /// assert_eq!(
    ///     header,
    ///     "t=1700000000,v1=316b9ab98c15bfa039d243f3196acee619cf29749a91a634e6a8154e2f7b6727",
    /// );
    /// ```
    pub fn sign(&self, timestamp: i64, body: &[u8]) -> String {
        let timestamp = timestamp.to_string();
        let tag = self.mac(&timestamp, body).finalize().into_bytes();
        let mut hex = [0u8; V1_HEX_LEN];
        let v1 = base16ct::lower::encode_str(&tag, &mut hex)
            .expect("64 digits hold the 32 bytes of a SHA-256 tag");
        format!("t={timestamp},v1={v1}")
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Why a signature was refused. The message never contains the expected signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignatureError {
    /// The header is missing, not text, or not of the form `t=…,v1=…` (no `t`, several `t`,
    /// no `v1`, more than [`MAX_V1_ENTRIES`] `v1`, an entry without `=`).
    #[error("the Sangho-Signature header is missing or malformed")]
    Malformed,
    /// The timestamp is further from now than the tolerance, in either direction.
    #[error("the signature timestamp is outside the tolerance")]
    TimestampOutOfTolerance,
    /// No `v1` matches any configured secret.
    #[error("no signature matches")]
    Mismatch,
}

/// The most `v1` entries a header may carry: a bound on the HMAC work per request. The provider
/// sends one, or two while a secret is being rotated.
pub const MAX_V1_ENTRIES: usize = 8;

/// A parsed `Sangho-Signature` header: its timestamp and its `v1` signatures, borrowed from
/// the header's text.
///
/// The layer parses the header and checks its timestamp before it reads the body, then
/// verifies the body against it. [`verify`] does all three at once.
///
/// ```
/// use sangho_webhook::signature::{Secret, SignatureHeader};
/// use std::time::{Duration, UNIX_EPOCH};
///
/// let secret = Secret::new("whsec_x").unwrap();
/// let text = secret.sign(1_700_000_000, b"{}");
/// let header = SignatureHeader::parse(&text).unwrap();
/// assert_eq!(header.timestamp(), 1_700_000_000);
/// let now = UNIX_EPOCH + Duration::from_secs(1_700_000_010);
/// assert!(header.check_timestamp(now, Duration::from_secs(300)).is_ok());
/// assert!(header.verify(b"{}", &[secret]).is_ok());
/// ```
#[derive(Debug, Clone)]
pub struct SignatureHeader<'a> {
    /// The timestamp as written, which is what was signed.
    timestamp_text: &'a str,
    timestamp: i64,
    /// The `v1` values, unchecked: a malformed one simply never matches.
    v1: [&'a str; MAX_V1_ENTRIES],
    v1_count: usize,
}

impl<'a> SignatureHeader<'a> {
    /// Parses `t=<unix seconds>,v1=<hex>[,v1=<hex>…]`. Other schemes are ignored, spaces around
    /// entries are tolerated.
    ///
    /// # Errors
    ///
    /// [`SignatureError::Malformed`] when an entry has no `=`, there is no `t` or several, the
    /// timestamp is not a non-negative integer, or there is no `v1` or more than
    /// [`MAX_V1_ENTRIES`].
    pub fn parse(header: &'a str) -> Result<Self, SignatureError> {
        let mut timestamp_text = None;
        let mut v1 = [""; MAX_V1_ENTRIES];
        let mut v1_count = 0;
        for item in header.split(',') {
            let (scheme, value) = item
                .trim_ascii()
                .split_once('=')
                .ok_or(SignatureError::Malformed)?;
            match scheme {
                "t" if timestamp_text.is_some() => return Err(SignatureError::Malformed),
                "t" => timestamp_text = Some(value),
                "v1" => {
                    *v1.get_mut(v1_count).ok_or(SignatureError::Malformed)? = value;
                    v1_count += 1;
                }
                _ => {}
            }
        }
        let timestamp_text = timestamp_text.ok_or(SignatureError::Malformed)?;
        if v1_count == 0
            || timestamp_text.is_empty()
            || !timestamp_text.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(SignatureError::Malformed);
        }
        let timestamp = timestamp_text
            .parse()
            .map_err(|_| SignatureError::Malformed)?;
        Ok(Self {
            timestamp_text,
            timestamp,
            v1,
            v1_count,
        })
    }

    /// The signed timestamp, in Unix seconds.
    pub fn timestamp(&self) -> i64 {
        self.timestamp
    }

    /// The `v1` signatures as written.
    pub fn signatures(&self) -> &[&'a str] {
        &self.v1[..self.v1_count]
    }

    /// Checks that the timestamp is within `tolerance` of `now`, in both directions (bounds
    /// included).
    ///
    /// # Errors
    ///
    /// [`SignatureError::TimestampOutOfTolerance`] otherwise.
    pub fn check_timestamp(
        &self,
        now: SystemTime,
        tolerance: Duration,
    ) -> Result<(), SignatureError> {
        let age = unix_seconds(now).abs_diff(self.timestamp);
        if age > tolerance.as_secs() {
            return Err(SignatureError::TimestampOutOfTolerance);
        }
        Ok(())
    }

    /// Checks that some `v1` equals the HMAC of `"<t>.<body>"` under some secret, compared in
    /// constant time (`hmac`'s `verify_slice`). The timestamp is not checked here.
    ///
    /// # Errors
    ///
    /// [`SignatureError::Mismatch`] when none does.
    pub fn verify(&self, body: &[u8], secrets: &[Secret]) -> Result<(), SignatureError> {
        // Decoded again per secret rather than collected: no allocation, and decoding is cheap.
        let candidates = || self.signatures().iter().filter_map(|v| decode_v1(v));
        if candidates().next().is_none() {
            return Err(SignatureError::Mismatch);
        }
        for secret in secrets {
            let mac = secret.mac(self.timestamp_text, body);
            if candidates().any(|candidate| mac.clone().verify_slice(&candidate).is_ok()) {
                return Ok(());
            }
        }
        Err(SignatureError::Mismatch)
    }
}

/// Decodes a `v1` value, which must be exactly 64 lowercase hex digits: anything else (empty,
/// short, long, uppercase, not hex) never matches. `base16ct`'s lowercase decoder refuses
/// uppercase digits, as the format requires, in one constant-time pass.
fn decode_v1(value: &str) -> Option<[u8; 32]> {
    if value.len() != V1_HEX_LEN {
        return None;
    }
    let mut tag = [0u8; 32];
    base16ct::lower::decode(value, &mut tag).ok()?;
    Some(tag)
}

fn unix_seconds(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(since) => i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
        Err(before) => -i64::try_from(before.duration().as_secs()).unwrap_or(i64::MAX),
    }
}

/// Verifies a `Sangho-Signature` header value against the raw body.
///
/// In order: the header must parse; its timestamp must be within `tolerance` of `now` (both
/// directions, bounds included); then some `v1` must equal the HMAC of `"<t>.<body>"` under some
/// secret, compared in constant time (`hmac`'s `verify_slice`).
///
/// ```
/// use sangho_webhook::signature::{verify, Secret, SignatureError};
/// use std::time::{Duration, UNIX_EPOCH};
///
/// let old = Secret::new("whsec_old").unwrap();
/// let new = Secret::new("whsec_new").unwrap();
/// let header = new.sign(1_700_000_000, b"{}");
/// let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
/// let tolerance = Duration::from_secs(300);
///
/// // During a rotation both secrets are configured, and either one verifies.
/// assert!(verify(&header, b"{}", &[old.clone(), new], now, tolerance).is_ok());
/// assert_eq!(verify(&header, b"{}", &[old], now, tolerance), Err(SignatureError::Mismatch));
/// ```
pub fn verify(
    header: &str,
    body: &[u8],
    secrets: &[Secret],
    now: SystemTime,
    tolerance: Duration,
) -> Result<(), SignatureError> {
    let header = SignatureHeader::parse(header)?;
    header.check_timestamp(now, tolerance)?;
    header.verify(body, secrets)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(seconds)
    }

    const TOLERANCE: Duration = Duration::from_secs(300);

    #[test]
    fn parse_accepts_unknown_schemes_and_several_v1() {
        let parsed = SignatureHeader::parse("t=12,v0=abc,v1=aa,v1=bb").unwrap();
        assert_eq!(parsed.timestamp(), 12);
        assert_eq!(parsed.timestamp_text, "12");
        assert_eq!(parsed.signatures(), ["aa", "bb"]);
    }

    #[test]
    fn parse_refuses_malformed_headers() {
        for header in [
            "",
            "v1=aa",
            "t=1",
            "t=1,t=2,v1=aa",
            "t=,v1=aa",
            "t=-1,v1=aa",
            "t=1x,v1=aa",
            "t=1,v1",
            "garbage",
            "t=99999999999999999999999,v1=aa",
        ] {
            assert_eq!(
                SignatureHeader::parse(header).map(|_| ()),
                Err(SignatureError::Malformed),
                "{header}"
            );
        }
    }

    #[test]
    fn parse_takes_at_most_eight_v1() {
        let header = |count: usize| format!("t=1{}", ",v1=aa".repeat(count));
        assert_eq!(
            SignatureHeader::parse(&header(8))
                .unwrap()
                .signatures()
                .len(),
            8
        );
        assert_eq!(
            SignatureHeader::parse(&header(9)).map(|_| ()),
            Err(SignatureError::Malformed)
        );
    }

    #[test]
    fn decode_v1_takes_only_64_lowercase_hex_digits() {
        let good = "d95c6b7477fbd7e9f90b1b0ef5f9c7ac25abca5382460e0d988c2b2a5b71b990";
        assert!(decode_v1(good).is_some());
        assert!(decode_v1("").is_none());
        assert!(decode_v1(&good[..63]).is_none());
        assert!(decode_v1(&format!("{good}0")).is_none());
        assert!(decode_v1(&good.to_uppercase()).is_none());
        assert!(decode_v1(&good.replace('d', "g")).is_none());
    }

    #[test]
    fn decode_v1_reads_every_byte_value() {
        for first in 0..=255u8 {
            let bytes: [u8; 32] = std::array::from_fn(|i| first.wrapping_add(i as u8 * 8));
            let mut hex = [0u8; V1_HEX_LEN];
            let digits = base16ct::lower::encode_str(&bytes, &mut hex).unwrap();
            assert_eq!(decode_v1(digits), Some(bytes));
        }
    }

    #[test]
    fn timestamp_tolerance_includes_its_bounds_in_both_directions() {
        let secret = Secret::new("whsec_x").unwrap();
        let header = secret.sign(1_000_000, b"{}");
        let secrets = [secret];
        for now in [1_000_000 - 300, 1_000_000 + 300] {
            assert_eq!(verify(&header, b"{}", &secrets, at(now), TOLERANCE), Ok(()));
        }
        for now in [1_000_000 - 301, 1_000_000 + 301] {
            assert_eq!(
                verify(&header, b"{}", &secrets, at(now), TOLERANCE),
                Err(SignatureError::TimestampOutOfTolerance)
            );
        }
    }

    #[test]
    fn a_tampered_body_does_not_verify() {
        let secret = Secret::new("whsec_x").unwrap();
        let header = secret.sign(1_000_000, b"{\"a\":1}");
        assert_eq!(
            verify(&header, b"{\"a\":2}", &[secret], at(1_000_000), TOLERANCE),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn an_empty_v1_never_verifies() {
        let secret = Secret::new("whsec_x").unwrap();
        for header in ["t=1000000,v1=", "t=1000000,v1=,v1=", "t=1000000,v1=00"] {
            assert_eq!(
                verify(
                    header,
                    b"",
                    std::slice::from_ref(&secret),
                    at(1_000_000),
                    TOLERANCE
                ),
                Err(SignatureError::Mismatch)
            );
        }
    }
}
