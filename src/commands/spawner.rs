//! `delta __spawner` (hidden): the tool spawner process the engine starts when it starts, with
//! its control socket as stdin (see `delta_actors::tool::spawner`). Not for humans: run by
//! hand, it explains that and exits 2.

use crate::error::CliError;

/// The subcommand name the engine re-executes this binary with.
pub const SUBCOMMAND: &str = "__spawner";

pub fn run() -> Result<i32, CliError> {
    match delta_actors::tool::spawner::serve_stdin() {
        Ok(()) => Ok(0),
        Err(error @ delta_actors::tool::spawner::ServeError::NotAControlSocket) => {
            Err(CliError::Usage(format!("delta {SUBCOMMAND}: {error}")))
        }
        Err(error) => Err(CliError::Runtime(error.to_string())),
    }
}
