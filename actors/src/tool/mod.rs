//! Tools: the template compiler (`exec:`, `shell:`, legacy `command:`), argv building from
//! model arguments, and process execution with process groups, timeouts and output caps.

pub mod compile;
pub mod job;
pub mod observation;
pub mod process;
