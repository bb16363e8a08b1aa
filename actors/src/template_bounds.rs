//! Bounds on the work one template render may do, shared by plan templates and the scripted
//! model's templates (both come from files a user hands over): minijinja fuel (about one
//! unit per instruction) and a cap on the text produced. Without them, nested
//! `range(100000)` loops rendered for hours.
//!
//! Must not: choose template syntax or variables (each user of templates does).

use minijinja::{Environment, ErrorKind, Template};

/// Fuel per render: a loop over 100,000 items costs about a million units; nested
/// `range(100000)` loops (10^10) stop here in well under a second.
pub const TEMPLATE_FUEL: u64 = 5_000_000;
/// Largest text one render may produce.
pub const RENDERED_BYTES: usize = 8 * 1024 * 1024;

/// Gives `env` the fuel limit. Every environment that renders user templates calls this.
pub fn limit_work(env: &mut Environment<'_>) {
    env.set_fuel(Some(TEMPLATE_FUEL));
}

/// Renders `template` into a string of at most [`RENDERED_BYTES`].
pub fn render_bounded<S: serde::Serialize>(
    template: &Template<'_, '_>,
    context: S,
) -> Result<String, minijinja::Error> {
    let mut out = CappedText::default();
    match template.render_captured_to(context, &mut out) {
        Ok(_) => Ok(String::from_utf8_lossy(&out.bytes).into_owned()),
        Err(_) if out.overflowed => Err(minijinja::Error::new(
            ErrorKind::InvalidOperation,
            format!("the template produced more than {RENDERED_BYTES} bytes of text"),
        )),
        Err(error) => Err(error),
    }
}

/// A readable explanation for the errors these bounds cause, `None` for the others.
pub fn explain(error: &minijinja::Error) -> Option<String> {
    (error.kind() == ErrorKind::OutOfFuel).then(|| {
        format!(
            "the template does too much work (more than {TEMPLATE_FUEL} steps: nested loops over \
             large ranges?)"
        )
    })
}

#[derive(Default)]
struct CappedText {
    bytes: Vec<u8>,
    overflowed: bool,
}

impl std::io::Write for CappedText {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + buf.len() > RENDERED_BYTES {
            self.overflowed = true;
            return Err(std::io::Error::other("rendered text too large"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn bounded_env() -> Environment<'static> {
        let mut env = Environment::new();
        limit_work(&mut env);
        env
    }

    #[test]
    fn nested_huge_loops_run_out_of_fuel_quickly() {
        let env = bounded_env();
        let template = env
            .template_from_str(
                "{% for a in range(100000) %}{% for b in range(100000) %}x{% endfor %}{% endfor %}",
            )
            .unwrap();
        let started = std::time::Instant::now();
        let error = render_bounded(&template, ()).unwrap_err();
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        assert!(
            explain(&error).unwrap().contains("too much work"),
            "{error}"
        );
    }

    #[test]
    fn output_beyond_the_cap_is_an_error_naming_it() {
        let env = bounded_env();
        let template = env
            .template_from_str("{% for a in range(100) %}{{ 'x' * 100000 }}{% endfor %}")
            .unwrap();
        let error = render_bounded(&template, ()).unwrap_err();
        assert!(
            error.to_string().contains("more than 8388608 bytes"),
            "{error}"
        );
        let small = env.template_from_str("{{ 'ab' * 3 }}").unwrap();
        assert_eq!(render_bounded(&small, ()).unwrap(), "ababab");
    }
}
