//! Tools: the template compiler (`exec:`, `shell:`, legacy `command:`), argv building from
//! model arguments, the tool-kind port (`kind`: a tool is a process, a built-in such as
//! `ask_human`, or an MCP server's tool), the classification of a model's tool call against
//! a run's kinds (`call`), MCP servers (`mcp`), and process execution with process groups,
//! timeouts and output caps, from this process or from the tool spawner (a small helper
//! process started with the engine, so starting a tool does not cost more as the engine
//! grows).

pub mod ask_human;
pub mod call;
pub mod compile;
pub mod isolation;
pub(crate) mod job;
pub mod kind;
pub mod mcp;
pub mod observation;
pub mod process;
pub mod spawner;
