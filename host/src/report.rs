//! One line from an error and its causes, for the places an error leaves the program: the
//! command line's stderr, `/status` and `leasehold check`.

use std::error::Error;

/// The error's message followed by each cause's, joined by `": "`. A cause whose message the
/// line already holds (an error that prints its source itself) is not repeated.
pub fn chain(error: &(dyn Error + 'static)) -> String {
    let mut line = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        let text = e.to_string();
        if !text.is_empty() && !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        cause = e.source();
    }
    line
}

/// Each cause's message, outermost first, without the error's own: for JSON reports.
pub fn causes(error: &(dyn Error + 'static)) -> Vec<String> {
    std::iter::successors(error.source(), |e| (*e).source())
        .map(ToString::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("plugin.wasm: cannot read")]
    struct Plain(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("config.toml: {0}")]
    struct PrintsItsSource(#[source] std::io::Error);

    #[test]
    fn a_chain_names_every_cause_once() {
        let io = || std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        assert_eq!(
            chain(&Plain(io())),
            "plugin.wasm: cannot read: no such file"
        );
        assert_eq!(chain(&PrintsItsSource(io())), "config.toml: no such file");
        assert_eq!(causes(&Plain(io())), ["no such file"]);
    }
}
