//! Opening a port: a spec's kind picks the backend (`model`, `mlx5`/`verbs`, `xdp`). The one
//! module that knows every backend; the backends themselves implement `spec::Backend` and import
//! nothing from here, so the room graph keeps no cycle through the spec types.

use crate::spec::{echo, needs_escape, Backend, Port, PortOptions};
use crate::Error;

/// Opens a port from its spec (see the module docs for the forms) with the default options.
pub fn open(spec: &str) -> Result<Port, Error> {
    open_with(spec, &PortOptions::default())
}

/// Opens a port from its spec with the given rules and queue count.
// A build without any backend refuses every kind: then nothing reads the name after the kind.
#[cfg_attr(
    not(any(feature = "model", feature = "mlx5", feature = "xdp")),
    allow(unused_variables)
)]
pub fn open_with(spec: &str, opts: &PortOptions) -> Result<Port, Error> {
    if opts.rx_queues == 0 {
        return Err(Error::config("a port needs at least one receive queue"));
    }
    // A spec is one line of text: what the tools repeat of it (`Port::spec`) stays one line.
    if let Some((at, c)) = spec.char_indices().find(|&(_, c)| needs_escape(c)) {
        return Err(Error::spec(format!(
            "`{}` has a control character ({}) at column {}; a spec is one line of text",
            echo(spec),
            echo(&c.to_string()),
            spec[..at].chars().count() + 1
        )));
    }
    let (kind, rest) = spec.split_once(':').ok_or_else(|| {
        Error::spec(format!(
            "`{}` has no kind; expected KIND:NAME, e.g. model:pair0/0",
            echo(spec)
        ))
    })?;
    // Promiscuous replaces the rules wherever a port has rules, so asking for both is a mistake.
    if opts.promiscuous && !opts.rules.is_empty() {
        return Err(Error::config(format!(
            "{}: PortOptions has both rules and promiscuous, which takes every frame; give one of them",
            echo(spec)
        )));
    }
    let backend: Result<Box<dyn Backend>, Error> = match kind {
        #[cfg(feature = "model")]
        "model" => crate::model::open_model(rest, spec, opts),
        #[cfg(feature = "mlx5")]
        "mlx5" | "verbs" => crate::mlx5::open_port(kind, rest, opts),
        #[cfg(feature = "xdp")]
        "xdp" => crate::xdp::open_port(rest, opts),
        // A kind this build left out: one line naming the feature that brings it back.
        #[cfg(not(feature = "model"))]
        "model" => Err(left_out(spec, "model")),
        #[cfg(not(feature = "mlx5"))]
        "mlx5" | "verbs" => Err(left_out(spec, "mlx5")),
        #[cfg(not(feature = "xdp"))]
        "xdp" => Err(left_out(spec, "xdp")),
        _ => {
            return Err(Error::spec(format!(
                "unknown port kind `{}` in `{}`; known kinds: model, mlx5, verbs, xdp",
                echo(kind),
                echo(spec)
            )))
        }
    };
    Ok(Port::new(spec, backend?))
}

/// The error for a known kind whose backend this build was compiled without.
#[cfg(not(all(feature = "model", feature = "mlx5", feature = "xdp")))]
fn left_out(spec: &str, feature: &str) -> Error {
    Error::config(format!(
        "{}: this build has no {feature} backend (cargo feature `{feature}`)",
        echo(spec)
    ))
}

#[cfg(all(test, feature = "model"))]
mod tests {
    use super::*;

    #[test]
    fn model_ports_refuse_options_they_would_ignore() {
        let rules = PortOptions {
            rules: vec!["udp dst-port 53".parse().unwrap()],
            ..PortOptions::default()
        };
        let queues = PortOptions {
            rx_queues: 2,
            ..PortOptions::default()
        };
        for o in [rules, queues] {
            let e = open_with("model:spec-opts/0", &o).unwrap_err().to_string();
            assert!(e.contains("model ports take no rules and have no RSS"), "{e}");
        }
        let promiscuous = PortOptions {
            promiscuous: true,
            ..PortOptions::default()
        };
        assert!(open_with("model:spec-opts/0", &promiscuous).is_ok());
    }
}

#[cfg(test)]
#[cfg(not(all(feature = "model", feature = "mlx5", feature = "xdp")))]
mod left_out_tests {
    use super::*;

    #[test]
    fn a_kind_this_build_left_out_is_refused_in_one_line_naming_its_feature() {
        let kinds = [
            (cfg!(feature = "model"), "model:lo0/0", "model"),
            (cfg!(feature = "mlx5"), "mlx5:mlx5_0", "mlx5"),
            (cfg!(feature = "mlx5"), "verbs:mlx5_0/1", "mlx5"),
            (cfg!(feature = "xdp"), "xdp:lo", "xdp"),
        ];
        for (built, spec, feature) in kinds {
            if built {
                continue;
            }
            let Err(e) = open(spec) else {
                panic!("{spec}: a left-out kind must not open")
            };
            assert!(e.is_usage(), "{spec}: {e}");
            let line = e.to_string();
            assert!(line.contains(&format!("cargo feature `{feature}`")), "{line}");
            assert!(!line.contains('\n'), "{line}");
        }
    }
}
