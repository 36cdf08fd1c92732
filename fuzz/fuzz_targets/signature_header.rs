//! The `Sangho-Signature` parser and `verify`, on any header text and body: never a panic, at
//! most eight `v1` entries accepted, and nothing verifies without the secret's HMAC.

#![no_main]

use std::time::{Duration, UNIX_EPOCH};

use libfuzzer_sys::fuzz_target;
use sangho_webhook::signature::{MAX_V1_ENTRIES, Secret, SignatureHeader, verify};

fuzz_target!(|input: (&str, &[u8], u32)| {
    let (header, body, now) = input;
    let secret = Secret::new("whsec_fuzz").expect("a valid secret");
    let now = UNIX_EPOCH + Duration::from_secs(u64::from(now));
    let tolerance = Duration::from_secs(300);
    if let Ok(parsed) = SignatureHeader::parse(header) {
        assert!(!parsed.signatures().is_empty());
        assert!(parsed.signatures().len() <= MAX_V1_ENTRIES);
        assert!(parsed.timestamp() >= 0);
        if parsed.verify(body, std::slice::from_ref(&secret)).is_ok() {
            // A verified header must carry the real signature of this body at its timestamp.
            let expected = secret.sign(parsed.timestamp(), body);
            let v1 = expected.split_once(",v1=").expect("sign writes v1").1;
            assert!(parsed.signatures().contains(&v1), "{header:?} verified without the HMAC");
        }
    }
    let _ = verify(header, body, &[secret], now, tolerance);
});
