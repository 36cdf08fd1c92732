//! Store URLs as the log shows them.

/// The store URL as the log shows it: its scheme, host, port and path. The user name and
/// password (`user:password@`), the query (`?user=…&password=…`, `?sslpassword=…`) and the
/// fragment are left out, so that the log never holds a credential. A URL whose parts cannot
/// be told apart (an `@` after a `?` or `#`) shows its scheme only.
pub fn loggable_url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some(parts) => parts,
        None => match url.split_once(':') {
            // `memory:`, `sqlite:file.db`: no authority to hide a password in.
            Some((_, rest)) if !rest.contains(['@', '?', '#']) => return url.to_owned(),
            Some((scheme, _)) => return format!("{scheme}:…"),
            None => return "…".to_owned(),
        },
    };
    let (before_query, query) = match rest.find(['?', '#']) {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    if query.contains('@') {
        // A password with an unencoded `?` or `#`, or an `@` in the query: where the password
        // ends is a guess, so nothing after the scheme is shown.
        return format!("{scheme}://…");
    }
    let host_and_path = match before_query.rfind('@') {
        Some(at) => &before_query[at + 1..],
        None => before_query,
    };
    format!("{scheme}://{host_and_path}")
}
