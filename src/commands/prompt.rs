//! `-i`: ask_human answered on the terminal. The question goes to stderr and the answer is
//! read from stdin; passwords and sensitive answers are read with echo off when stdin is a
//! terminal; confirmations re-ask until yes/no. EOF is an error, never a silent exit.

use std::io::{BufRead, IsTerminal};

use delta_actors::HumanPrompter;
use nix::sys::termios::{tcgetattr, tcsetattr, LocalFlags, SetArg};

pub struct TerminalPrompter;

impl HumanPrompter for TerminalPrompter {
    fn ask(&self, prompt: &str, input_type: &str, sensitive: bool) -> Result<String, String> {
        crate::notice!();
        crate::notice!("? The agent asks: {prompt}");
        loop {
            let answer = match input_type {
                "confirmation" => read_line("Please answer yes or no: ", false)?,
                _ if sensitive || input_type == "password" => read_line("(input hidden) > ", true)?,
                _ => read_line("> ", false)?,
            };
            if input_type != "confirmation" {
                return Ok(answer);
            }
            match answer.trim().to_ascii_lowercase().as_str() {
                "yes" | "y" => return Ok("yes".into()),
                "no" | "n" => return Ok("no".into()),
                _ => crate::notice!("Please answer yes, no, y or n."),
            }
        }
    }
}

fn read_line(label: &str, hidden: bool) -> Result<String, String> {
    crate::output::prompt(label);
    let stdin = std::io::stdin();
    let restore = if hidden && stdin.is_terminal() {
        let original = tcgetattr(&stdin).map_err(|e| e.to_string())?;
        let mut quiet = original.clone();
        quiet.local_flags.remove(LocalFlags::ECHO);
        tcsetattr(&stdin, SetArg::TCSANOW, &quiet).map_err(|e| e.to_string())?;
        Some(original)
    } else {
        None
    };
    let mut line = String::new();
    let read = stdin.lock().read_line(&mut line);
    if let Some(original) = restore {
        let _ = tcsetattr(&stdin, SetArg::TCSANOW, &original);
        crate::notice!();
    }
    match read {
        Ok(0) => Err("stdin was closed (EOF) before an answer was given".into()),
        Ok(_) => Ok(line.trim_end_matches(['\n', '\r']).to_string()),
        Err(e) => Err(format!("cannot read the answer: {e}")),
    }
}
