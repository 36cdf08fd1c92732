//! Known-answer vectors: public signatures for this header format, produced by Stripe's SDKs.

use std::time::{Duration, UNIX_EPOCH};

use sangho_webhook::{
    signature::{Secret, verify},
    testing::fixtures::{KNOWN_ANSWERS, SECRET},
};

#[test]
fn signing_reproduces_the_known_answers() {
    let secret = Secret::new(SECRET).unwrap();
    for vector in KNOWN_ANSWERS {
        assert_eq!(
            secret.sign(vector.timestamp, vector.body),
            format!("t={},v1={}", vector.timestamp, vector.v1)
        );
    }
}

#[test]
fn known_answers_verify() {
    let secret = Secret::new(SECRET).unwrap();
    for vector in KNOWN_ANSWERS {
        let header = format!("t={},v1={}", vector.timestamp, vector.v1);
        let now = UNIX_EPOCH + Duration::from_secs(vector.timestamp.unsigned_abs());
        assert_eq!(
            verify(
                &header,
                vector.body,
                std::slice::from_ref(&secret),
                now,
                Duration::from_secs(300)
            ),
            Ok(())
        );
    }
}

#[test]
fn secret_debug_output_is_redacted() {
    let secret = Secret::new(SECRET).unwrap();
    assert!(!format!("{secret:?}").contains("test_secret"));
}
