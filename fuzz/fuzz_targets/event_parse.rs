//! `SanghoEvent::parse` on any bytes: never a panic, and an accepted event always has a valid
//! id and type and keeps the bytes unchanged.

#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use sangho_webhook::{
    SanghoEvent,
    event::{is_valid_event_id, is_valid_event_type},
};

fuzz_target!(|body: &[u8]| {
    let raw = Bytes::copy_from_slice(body);
    if let Ok(event) = SanghoEvent::parse(raw.clone()) {
        assert!(is_valid_event_id(event.id()));
        assert!(is_valid_event_type(event.event_type()));
        assert_eq!(event.raw(), &raw);
        let debug = format!("{event:?}");
        assert!(debug.len() < 512 + event.id().len() + event.event_type().len());
    }
});
