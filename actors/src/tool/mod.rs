//! Tools: the template compiler (`exec:`, `shell:`, legacy `command:`), argv building from
//! model arguments, the built-in `ask_human`, the classification of a model's tool call
//! (`call`), and process execution with process groups, timeouts and output caps, from this
//! process or from the tool spawner (a small helper process started with the engine, so
//! starting a tool does not cost more as the engine grows).

pub mod ask_human;
pub(crate) mod call;
pub mod compile;
pub mod isolation;
pub(crate) mod job;
pub mod observation;
pub mod process;
pub mod spawner;
