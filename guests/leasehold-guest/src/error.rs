//! The error of a plugin's call, which `?` builds from any error type.

use std::error::Error as StdError;
use std::fmt;

/// Why a call of a plugin ([`Reconciler`](crate::Reconciler),
/// [`EventHandler`](crate::EventHandler), [`HealthCheck`](crate::HealthCheck)) failed.
///
/// `?` converts into it from any [`std::error::Error`] (a
/// [`CapabilityError`](crate::CapabilityError) of [`kv`](crate::kv) or [`sql`](crate::sql),
/// [`std::num::ParseIntError`], [`std::io::Error`], ...) and from a `String` or `&str` message,
/// such as the errors of the [`Config`](crate::Config) helpers. Build one from a message with
/// [`Error::msg`] or [`bail!`](crate::bail), and say what was being done with
/// [`context`](ErrorContext::context).
///
/// The host receives its [`Display`](fmt::Display) text, which is the whole chain of causes
/// joined by `": "` (and shows it in its log and `/status`):
///
/// ```
/// use leasehold_guest::{Error, ErrorContext};
///
/// fn checkpoint(text: &str) -> Result<u64, Error> {
///     let n: u64 = text.parse().context("reading checkpoint")?;
///     Ok(n)
/// }
///
/// assert_eq!(
///     checkpoint("12x").unwrap_err().to_string(),
///     "reading checkpoint: invalid digit found in string"
/// );
/// ```
///
/// `Error` does not implement [`std::error::Error`] itself (so that the blanket conversion above
/// is possible, as with `anyhow::Error`); [`Error::chain`] gives the errors it holds, and
/// `String::from(error)` its text.
pub struct Error {
    inner: Box<dyn StdError + Send + Sync + 'static>,
}

impl Error {
    /// An error with `message` as its text.
    ///
    /// ```
    /// # use leasehold_guest::Error;
    /// let batch = 0;
    /// let e = Error::msg(format!("batch must be at least 1, not {batch}"));
    /// assert_eq!(e.to_string(), "batch must be at least 1, not 0");
    /// ```
    pub fn msg(message: impl fmt::Display) -> Error {
        Error {
            inner: Box::new(Message(message.to_string())),
        }
    }

    /// This error with `context` in front: its text becomes `"{context}: {self}"`.
    pub fn context(self, context: impl fmt::Display) -> Error {
        Error {
            inner: Box::new(WithContext {
                context: context.to_string(),
                source: self.inner,
            }),
        }
    }

    /// The errors of the chain, outermost first: each is the
    /// [`source`](std::error::Error::source) of the one before.
    pub fn chain(&self) -> impl Iterator<Item = &(dyn StdError + 'static)> {
        let first: &(dyn StdError + 'static) = &*self.inner;
        std::iter::successors(Some(first), |e| (*e).source())
    }

    /// The first error of the chain that is an `E`, if any, e.g. the
    /// [`CapabilityError`](crate::CapabilityError) below a [`context`](Error::context).
    pub fn downcast_ref<E: StdError + 'static>(&self) -> Option<&E> {
        self.chain().find_map(|e| e.downcast_ref::<E>())
    }

    /// Whether the chain holds [`CapabilityError::LeaseLost`](crate::CapabilityError::LeaseLost):
    /// a fenced write was refused because another replica may hold the lease now, and nothing of
    /// it was kept. A plugin usually stops writing and returns `Ok` then.
    pub fn is_lease_lost(&self) -> bool {
        self.downcast_ref::<crate::CapabilityError>()
            .is_some_and(crate::CapabilityError::is_lease_lost)
    }
}

/// Any [`std::error::Error`] that is `Send + Sync` (as error types are), `String`, `&str` or
/// `Box<dyn std::error::Error + Send + Sync>`: what `?` converts from. (Bounded by `Into<Box<dyn
/// Error + Send + Sync>>` rather than by `Error` itself, which could not be combined with a
/// `From<String>`.)
impl<E> From<E> for Error
where
    E: Into<Box<dyn StdError + Send + Sync + 'static>>,
{
    fn from(error: E) -> Error {
        Error {
            inner: error.into(),
        }
    }
}

/// The [`Display`](fmt::Display) text, for code whose errors are `String`s.
impl From<Error> for String {
    fn from(error: Error) -> String {
        error.to_string()
    }
}

/// Every message of the chain, joined by `": "`; a message that the text so far already ends
/// with (an error that repeats its source's text) is skipped.
impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut text = String::new();
        for error in self.chain() {
            let part = error.to_string();
            if part.is_empty() || text.ends_with(&part) {
                continue;
            }
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&part);
        }
        f.write_str(&text)
    }
}

/// `Error("the Display text")`, as `unwrap` in a test shows it.
impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Error").field(&self.to_string()).finish()
    }
}

impl AsRef<dyn StdError + Send + Sync + 'static> for Error {
    fn as_ref(&self) -> &(dyn StdError + Send + Sync + 'static) {
        &*self.inner
    }
}

impl AsRef<dyn StdError + 'static> for Error {
    fn as_ref(&self) -> &(dyn StdError + 'static) {
        &*self.inner
    }
}

/// The text of [`Error::msg`].
struct Message(String);

impl fmt::Debug for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl StdError for Message {}

/// An error with what was being done in front of it.
#[derive(Debug)]
struct WithContext {
    context: String,
    source: Box<dyn StdError + Send + Sync + 'static>,
}

impl fmt::Display for WithContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.context)
    }
}

impl StdError for WithContext {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.source)
    }
}

/// Adds what was being done to the error of a `Result` (or to a `None`), as [`Error::context`]
/// does:
///
/// ```
/// use leasehold_guest::{Config, Error, ErrorContext};
///
/// fn init(config: &Config) -> Result<u32, Error> {
///     let raw = config.get("batch").context("no batch size")?;
///     let batch = raw.parse::<u32>().with_context(|| format!("batch size {raw:?}"))?;
///     Ok(batch)
/// }
///
/// let config = Config::from_iter([("batch", "ten")]);
/// let e = init(&config).unwrap_err();
/// assert_eq!(e.to_string(), r#"batch size "ten": invalid digit found in string"#);
/// assert_eq!(init(&Config::default()).unwrap_err().to_string(), "no batch size");
/// ```
pub trait ErrorContext<T> {
    /// The error, if any, as an [`Error`] with `context` in front of it (for an `Option`, an
    /// [`Error`] whose text is `context`).
    fn context(self, context: impl fmt::Display) -> Result<T, Error>;

    /// Like [`context`](ErrorContext::context), building the context only on error.
    fn with_context<C: fmt::Display>(self, context: impl FnOnce() -> C) -> Result<T, Error>;
}

impl<T, E: Into<Error>> ErrorContext<T> for Result<T, E> {
    fn context(self, context: impl fmt::Display) -> Result<T, Error> {
        self.map_err(|e| e.into().context(context))
    }

    fn with_context<C: fmt::Display>(self, context: impl FnOnce() -> C) -> Result<T, Error> {
        self.map_err(|e| e.into().context(context()))
    }
}

impl<T> ErrorContext<T> for Option<T> {
    fn context(self, context: impl fmt::Display) -> Result<T, Error> {
        self.ok_or_else(|| Error::msg(context))
    }

    fn with_context<C: fmt::Display>(self, context: impl FnOnce() -> C) -> Result<T, Error> {
        self.ok_or_else(|| Error::msg(context()))
    }
}

/// Returns early with an [`Error`]: `bail!("format {args}")` is
/// `return Err(Error::msg(format!("format {args}")))`, and `bail!(error)` (any value `?` would
/// convert, such as a [`CapabilityError`](crate::CapabilityError)) is
/// `return Err(Error::from(error))`.
///
/// ```
/// use leasehold_guest::{bail, Error};
///
/// fn batch(n: u32) -> Result<u32, Error> {
///     if n == 0 {
///         bail!("config key \"batch\": must be at least 1, not {n}");
///     }
///     Ok(n)
/// }
///
/// let e = batch(0).unwrap_err();
/// assert_eq!(e.to_string(), r#"config key "batch": must be at least 1, not 0"#);
/// ```
#[macro_export]
macro_rules! bail {
    ($message:literal $(,)?) => {
        return ::core::result::Result::Err($crate::Error::msg(::std::format!($message)))
    };
    ($error:expr $(,)?) => {
        return ::core::result::Result::Err($crate::Error::from($error))
    };
    ($format:expr, $($arg:tt)+) => {
        return ::core::result::Result::Err($crate::Error::msg(::std::format!($format, $($arg)+)))
    };
}

/// Returns early with an [`Error`] unless a condition holds: `ensure!(cond, "format {args}")` is
/// `if !cond { bail!("format {args}") }`; without a message the text names the condition.
///
/// ```
/// use leasehold_guest::{ensure, Error};
///
/// fn every(n: u64) -> Result<u64, Error> {
///     ensure!(n > 0, "config key \"fail_every\": must be 1 or more");
///     ensure!(n < 1000);
///     Ok(n)
/// }
///
/// assert_eq!(every(0).unwrap_err().to_string(), r#"config key "fail_every": must be 1 or more"#);
/// assert_eq!(every(5000).unwrap_err().to_string(), "condition failed: n < 1000");
/// ```
#[macro_export]
macro_rules! ensure {
    ($condition:expr $(,)?) => {
        if !$condition {
            return ::core::result::Result::Err($crate::Error::msg(::core::concat!(
                "condition failed: ",
                ::core::stringify!($condition)
            )));
        }
    };
    ($condition:expr, $($message:tt)+) => {
        if !$condition {
            $crate::bail!($($message)+);
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CapabilityError;

    #[test]
    fn question_mark_converts_common_errors() {
        fn parse(s: &str) -> Result<u64, Error> {
            Ok(s.parse::<u64>()?)
        }
        assert_eq!(
            parse("x").unwrap_err().to_string(),
            "invalid digit found in string"
        );

        fn io() -> Result<(), Error> {
            Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no checkpoint file",
            ))?;
            Ok(())
        }
        assert_eq!(io().unwrap_err().to_string(), "no checkpoint file");

        fn capability() -> Result<(), Error> {
            Err(CapabilityError::TooLarge("20 rows".into()))?;
            Ok(())
        }
        let e = capability().unwrap_err();
        assert_eq!(e.to_string(), "too large: 20 rows");
        assert_eq!(
            e.downcast_ref::<CapabilityError>(),
            Some(&CapabilityError::TooLarge("20 rows".into()))
        );

        fn strings(owned: bool) -> Result<(), Error> {
            if owned {
                Err(format!("owned {}", 1))?;
            }
            Err("borrowed")?;
            Ok(())
        }
        assert_eq!(strings(true).unwrap_err().to_string(), "owned 1");
        assert_eq!(strings(false).unwrap_err().to_string(), "borrowed");

        fn config() -> Result<u8, Error> {
            let c = crate::Config::from_iter([("n", "300")]);
            Ok(c.parse_or("n", 1)?)
        }
        assert_eq!(
            config().unwrap_err().to_string(),
            r#"config key "n": "300" is not a valid u8 (number too large to fit in target type)"#
        );

        fn boxed() -> Result<(), Box<dyn StdError + Send + Sync>> {
            Err("boxed")?
        }
        fn from_boxed() -> Result<(), Error> {
            boxed()?;
            Ok(())
        }
        assert_eq!(from_boxed().unwrap_err().to_string(), "boxed");

        fn send_sync<T: Send + Sync>() {}
        send_sync::<Error>();

        // `.into()` and a `String`-returning helper, for code migrating from `String` errors.
        let e: Error = "x".into();
        assert_eq!(String::from(e), "x");
        fn old_style() -> Result<(), String> {
            Err(Error::msg("from an Error"))?;
            Ok(())
        }
        assert_eq!(old_style().unwrap_err(), "from an Error");
    }

    #[test]
    fn context_chains_messages() {
        fn read(text: &str) -> Result<u64, Error> {
            text.parse::<u64>().context("reading checkpoint")
        }
        let e = read("x").unwrap_err();
        assert_eq!(
            e.to_string(),
            "reading checkpoint: invalid digit found in string"
        );
        let e = e.context(format!("shard {}", 3));
        assert_eq!(
            e.to_string(),
            "shard 3: reading checkpoint: invalid digit found in string"
        );
        let texts: Vec<String> = e.chain().map(ToString::to_string).collect();
        assert_eq!(
            texts,
            [
                "shard 3",
                "reading checkpoint",
                "invalid digit found in string"
            ]
        );
        assert!(e.downcast_ref::<std::num::ParseIntError>().is_some());
        assert_eq!(
            format!("{e:?}"),
            r#"Error("shard 3: reading checkpoint: invalid digit found in string")"#
        );

        let lost: Result<(), CapabilityError> = Err(CapabilityError::LeaseLost);
        let e = lost.with_context(|| "saving checkpoint").unwrap_err();
        assert!(e.is_lease_lost());
        assert!(e.to_string().starts_with("saving checkpoint: lease lost: "));
        assert!(!Error::msg("x").is_lease_lost());

        assert_eq!(
            None::<u8>.context("no shard").unwrap_err().to_string(),
            "no shard"
        );
        assert_eq!(Some(1).context("no shard").unwrap(), 1);
        let e: Result<(), Error> = Err(Error::msg("inner"));
        assert_eq!(e.context("outer").unwrap_err().to_string(), "outer: inner");
    }

    #[test]
    fn sources_are_followed_and_repeats_skipped() {
        #[derive(Debug)]
        struct Outer(std::num::ParseIntError, bool);
        impl fmt::Display for Outer {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                if self.1 {
                    write!(f, "bad number: {}", self.0) // repeats its source
                } else {
                    f.write_str("bad number")
                }
            }
        }
        impl StdError for Outer {
            fn source(&self) -> Option<&(dyn StdError + 'static)> {
                Some(&self.0)
            }
        }
        let cause = "x".parse::<u8>().unwrap_err();
        assert_eq!(
            Error::from(Outer(cause.clone(), false)).to_string(),
            "bad number: invalid digit found in string"
        );
        assert_eq!(
            Error::from(Outer(cause, true)).to_string(),
            "bad number: invalid digit found in string"
        );
    }

    #[test]
    fn bail_and_ensure() {
        fn f(n: u32) -> Result<u32, Error> {
            ensure!(n != 1);
            ensure!(n != 2, "two is {}", "refused");
            ensure!(n != 3, "three");
            if n == 4 {
                bail!("four: {n}");
            }
            if n == 5 {
                bail!("{}: {}", "five", n);
            }
            if n == 6 {
                bail!(CapabilityError::LeaseLost);
            }
            if n == 7 {
                bail!(String::from("seven"));
            }
            Ok(n)
        }
        let text = |n| f(n).unwrap_err().to_string();
        assert_eq!(text(1), "condition failed: n != 1");
        assert_eq!(text(2), "two is refused");
        assert_eq!(text(3), "three");
        assert_eq!(text(4), "four: 4");
        assert_eq!(text(5), "five: 5");
        assert!(f(6).unwrap_err().is_lease_lost());
        assert_eq!(text(7), "seven");
        assert_eq!(f(8).unwrap(), 8);
    }
}
