//! Settings that cannot work are refused when the layer is built, never discovered in
//! production.

use std::time::Duration;

use sangho_webhook::{
    ConfigError, SanghoWebhookLayer, SanghoWebhookLayerBuilder,
    signature::{Secret, SecretError},
    store::MokaStore,
};

const SECRET: &str = "whsec_do_not_print_me";

fn builder() -> SanghoWebhookLayerBuilder {
    SanghoWebhookLayer::builder(Secret::new(SECRET).unwrap(), MokaStore::new())
}

#[test]
fn the_defaults_are_valid() {
    assert!(builder().build().is_ok());
}

#[test]
fn a_zero_or_sub_second_lease_is_refused() {
    for lease in [Duration::ZERO, Duration::from_millis(999)] {
        let refused = builder().with_lease(lease).build().unwrap_err();
        assert_eq!(refused, ConfigError::LeaseTooShort(lease));
    }
    assert!(builder().with_lease(Duration::from_secs(1)).build().is_ok());
}

#[test]
fn a_zero_or_sub_second_tolerance_is_refused() {
    for tolerance in [Duration::ZERO, Duration::from_millis(500)] {
        let refused = builder().with_tolerance(tolerance).build().unwrap_err();
        assert_eq!(refused, ConfigError::ToleranceTooShort(tolerance));
    }
}

#[test]
fn a_zero_or_sub_second_store_timeout_is_refused() {
    for timeout in [Duration::ZERO, Duration::from_millis(100)] {
        let refused = builder().with_store_timeout(timeout).build().unwrap_err();
        assert_eq!(refused, ConfigError::StoreTimeoutTooShort(timeout));
    }
}

#[test]
fn a_zero_maximum_processing_time_is_refused() {
    let refused = builder()
        .with_max_processing_time(Duration::ZERO)
        .build()
        .unwrap_err();
    assert_eq!(
        refused,
        ConfigError::MaxProcessingTimeTooShort(Duration::ZERO)
    );
}

#[test]
fn a_retention_under_the_redelivery_window_is_refused_unless_allowed() {
    let day = Duration::from_secs(24 * 3600);
    let refused = builder().with_retention(day).build().unwrap_err();
    assert_eq!(refused, ConfigError::RetentionTooShort(day));
    assert!(refused.to_string().contains("48 h"), "{refused}");
    assert!(
        builder()
            .with_retention(day)
            .with_short_retention_allowed(true)
            .build()
            .is_ok()
    );
    assert!(
        builder()
            .with_retention(Duration::from_secs(48 * 3600))
            .build()
            .is_ok()
    );
}

#[test]
fn a_zero_retention_is_refused_even_when_short_ones_are_allowed() {
    let refused = builder()
        .with_retention(Duration::ZERO)
        .with_short_retention_allowed(true)
        .build()
        .unwrap_err();
    assert_eq!(refused, ConfigError::RetentionTooShort(Duration::ZERO));
}

#[test]
fn a_zero_body_limit_is_refused() {
    let refused = builder().with_max_body_size(0).build().unwrap_err();
    assert_eq!(refused, ConfigError::EmptyBodyLimit);
}

#[test]
fn a_secret_with_surrounding_whitespace_is_refused_without_printing_it() {
    for secret in [
        format!("{SECRET}\n"),
        format!("{SECRET}\r\n"),
        format!(" {SECRET}"),
        format!("\t{SECRET}"),
    ] {
        let refused = Secret::new(&secret).unwrap_err();
        assert_eq!(refused, SecretError::SurroundingWhitespace);
        let shown = format!("{refused} {refused:?}");
        assert!(shown.contains("whitespace"), "{shown}");
        assert!(!shown.contains("do_not_print_me"), "{shown}");
    }
    assert_eq!(Secret::new("").unwrap_err(), SecretError::Empty);
    assert!(Secret::new("whsec_inner space is fine").is_ok());
}

#[test]
fn the_layer_debug_output_hides_the_secret() {
    let layer = builder().build().unwrap();
    let shown = format!("{layer:?}");
    assert!(!shown.contains("do_not_print_me"), "{shown}");
}

#[test]
fn no_limit_is_refused_where_one_delivery_could_hold_its_event_past_the_redelivery_window() {
    let max = Duration::MAX;
    assert_eq!(
        builder().with_lease(max).build().unwrap_err(),
        ConfigError::LeaseTooLong(max)
    );
    assert_eq!(
        builder().with_max_processing_time(max).build().unwrap_err(),
        ConfigError::MaxProcessingTimeTooLong(max)
    );
    assert_eq!(
        builder().with_completion_retry(max).build().unwrap_err(),
        ConfigError::CompletionRetryTooLong(max)
    );
}

#[test]
fn the_upper_bounds_themselves_are_accepted() {
    let layer = builder()
        .with_lease(SanghoWebhookLayer::MAX_LEASE)
        .with_max_processing_time(SanghoWebhookLayer::MAX_PROCESSING_TIME)
        .with_completion_retry(SanghoWebhookLayer::MAX_COMPLETION_RETRY)
        .build();
    assert!(layer.is_ok());
}

#[test]
fn a_one_second_lease_with_the_default_store_timeout_is_valid() {
    // Each renewal is given what remains of the lease, not the whole store timeout.
    assert!(builder().with_lease(Duration::from_secs(1)).build().is_ok());
}

#[test]
fn a_lease_not_shorter_than_the_retention_is_refused() {
    let (lease, retention) = (Duration::from_secs(60), Duration::from_secs(60));
    let refused = builder()
        .with_lease(lease)
        .with_retention(retention)
        .with_short_retention_allowed(true)
        .build()
        .unwrap_err();
    assert_eq!(
        refused,
        ConfigError::LeaseNotUnderRetention { lease, retention }
    );
}
