//! Tools: the template compiler (`exec:`, `shell:`, legacy `command:`), argv building from
//! model arguments, and process execution with process groups, timeouts and output caps,
//! from this process or from the tool spawner (a small helper process started with the
//! engine, so starting a tool does not cost more as the engine grows).

pub mod compile;
pub mod observation;
pub mod process;
pub mod spawner;
