//! [`loggable_url`]: the store URL the examples log holds no credential.

use sangho_examples_support::loggable_url;

#[test]
fn the_logged_store_url_holds_no_credential() {
    for (url, logged) in [
        (
            "postgres://db.internal/shop?user=shop&password=secret",
            "postgres://db.internal/shop",
        ),
        (
            "postgres://db.internal/shop?password=secret",
            "postgres://db.internal/shop",
        ),
        (
            "postgres://shop:secret@db.internal:5432/shop",
            "postgres://db.internal:5432/shop",
        ),
        (
            "postgresql://shop:secret@db.internal/shop?sslmode=require&password=secret#x",
            "postgresql://db.internal/shop",
        ),
        (
            "redis://:secret@127.0.0.1:6379/0",
            "redis://127.0.0.1:6379/0",
        ),
        // Unencoded `@` in the password: the host is after the last one.
        ("redis://u:se@cret@cache:6379", "redis://cache:6379"),
        // Where the password ends cannot be told: the scheme only.
        ("postgres://shop:se?cret@db.internal/shop", "postgres://…"),
        (
            "postgres://db.internal/shop?password=se@cret",
            "postgres://…",
        ),
        ("sqlite://sangho-webhooks.db", "sqlite://sangho-webhooks.db"),
        ("sqlite:shop.db?password=secret", "sqlite:…"),
        ("memory:", "memory:"),
    ] {
        let shown = loggable_url(url);
        for part in ["secret", "se", "cret"] {
            assert!(!shown.contains(part), "{url} shows {part:?}: {shown}");
        }
        assert_eq!(shown, logged, "{url}");
    }
}
