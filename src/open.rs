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
    let backend: Box<dyn Backend> = match kind {
        #[cfg(feature = "model")]
        "model" => crate::model::open_model(rest, spec, opts)?,
        #[cfg(not(feature = "model"))]
        "model" => {
            return Err(Error::config(format!(
                "{}: this build has no model backend (feature `model`)",
                echo(spec)
            )))
        }
        "mlx5" | "verbs" => crate::mlx5::open_port(kind, rest, opts)?,
        "xdp" => crate::xdp::open_port(rest, opts)?,
        _ => {
            return Err(Error::spec(format!(
                "unknown port kind `{}` in `{}`; known kinds: model, mlx5, verbs, xdp",
                echo(kind),
                echo(spec)
            )))
        }
    };
    Ok(Port::new(spec, backend))
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
