//! Reporting errors at the edges (describe output, API error messages, the binaries' one line).

/// `error` and each of its sources, on one line, separated by `": "`.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// What a caught panic said: its `&str` or `String` payload (what `panic!` with a message carries),
/// else a placeholder.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload.downcast_ref::<&str>().copied().or_else(|| payload.downcast_ref::<String>().map(String::as_str)).unwrap_or("a panic without a message")
}

/// `f()`, or what it said if it panicked. For work whose panic must become an error to report
/// (callers own nothing that outlives the panic).
pub fn catch_panic<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|panic| panic_message(&*panic).to_owned())
}

/// `work`'s output, or what it said if it panicked while polled (see [`catch_panic`]).
pub async fn catch_panic_async<T>(work: impl Future<Output = T>) -> Result<T, String> {
    use futures_util::FutureExt as _;
    std::panic::AssertUnwindSafe(work).catch_unwind().await.map_err(|panic| panic_message(&*panic).to_owned())
}

#[cfg(test)]
mod tests {
    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn joins_the_chain() {
        let e = Outer(std::io::Error::other("inner"));
        assert_eq!(super::error_chain(&e), "outer: inner");
    }

    #[test]
    fn panic_messages_of_both_payload_kinds() {
        let literal = std::panic::catch_unwind(|| panic!("literal")).unwrap_err();
        assert_eq!(super::panic_message(&*literal), "literal");
        let n = 7;
        let formatted = std::panic::catch_unwind(|| panic!("formatted {n}")).unwrap_err();
        assert_eq!(super::panic_message(&*formatted), "formatted 7");
        let other = std::panic::catch_unwind(|| std::panic::panic_any(42_u8)).unwrap_err();
        assert_eq!(super::panic_message(&*other), "a panic without a message");
    }
}
