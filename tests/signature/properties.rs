//! Properties of signing and verifying, on arbitrary secrets, bodies and timestamps: what is
//! signed verifies, and any change to the body, the timestamp or a `v1` is refused.

use std::time::{Duration, UNIX_EPOCH};

use proptest::prelude::*;
use sangho_webhook::signature::{Secret, SignatureError, verify};

const TOLERANCE: Duration = Duration::from_secs(300);

/// A secret as the provider issues them: no surrounding whitespace, not empty.
fn secret_text() -> impl Strategy<Value = String> {
    "whsec_[A-Za-z0-9+/=]{1,48}"
}

fn at(seconds: i64) -> std::time::SystemTime {
    UNIX_EPOCH + Duration::from_secs(seconds as u64)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn what_is_signed_verifies(
        secret in secret_text(),
        body in proptest::collection::vec(any::<u8>(), 0..2048),
        timestamp in 0i64..4_000_000_000,
        skew in -300i64..=300,
    ) {
        let secret = Secret::new(&secret).unwrap();
        let header = secret.sign(timestamp, &body);
        let now = at((timestamp + skew).max(0));
        prop_assert_eq!(verify(&header, &body, &[secret], now, TOLERANCE), Ok(()));
    }

    #[test]
    fn any_change_to_the_body_is_refused(
        secret in secret_text(),
        body in proptest::collection::vec(any::<u8>(), 1..2048),
        position in any::<prop::sample::Index>(),
        flip in 1u8..=255,
    ) {
        let secret = Secret::new(&secret).unwrap();
        let header = secret.sign(1_700_000_000, &body);
        let mut changed = body.clone();
        changed[position.index(body.len())] ^= flip;
        prop_assert_eq!(
            verify(&header, &changed, &[secret], at(1_700_000_000), TOLERANCE),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn any_change_to_the_timestamp_is_refused(
        secret in secret_text(),
        body in proptest::collection::vec(any::<u8>(), 0..512),
        shift in prop_oneof![-1_000_000i64..0, 1i64..1_000_000],
    ) {
        let secret = Secret::new(&secret).unwrap();
        let header = secret.sign(1_700_000_000, &body);
        let forged = header.replacen("1700000000", &(1_700_000_000 + shift).to_string(), 1);
        // Checked at the forged time, so only the HMAC can refuse it.
        let now = at(1_700_000_000 + shift);
        prop_assert_eq!(
            verify(&forged, &body, &[secret], now, TOLERANCE),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn any_change_to_the_v1_is_refused(
        secret in secret_text(),
        body in proptest::collection::vec(any::<u8>(), 0..512),
        position in 0usize..64,
        digit in "[0-9a-f]",
    ) {
        let secret = Secret::new(&secret).unwrap();
        let header = secret.sign(1_700_000_000, &body);
        let start = header.find("v1=").unwrap() + 3;
        let mut forged = header.clone().into_bytes();
        prop_assume!(forged[start + position] != digit.as_bytes()[0]);
        forged[start + position] = digit.as_bytes()[0];
        let forged = String::from_utf8(forged).unwrap();
        prop_assert_eq!(
            verify(&forged, &body, &[secret], at(1_700_000_000), TOLERANCE),
            Err(SignatureError::Mismatch)
        );
    }
}
