//! The built-in `ask_human` tool: its parameters (one table used for the schema the model
//! sees, `delta tool expand` and the README), and the validation of the model's arguments
//! into an `AskHumanArgs`, exactly as strict as for any other tool: an unknown or missing
//! key, a wrong type or an unknown `input_type` is an [`ArgumentError`] the model reads.
//!
//! Must not: prompt anyone, pause a run or touch files (the run actor does that).

use serde_json::{json, Map, Value as Json};

use super::compile::error::ArgumentError;

/// Name of the built-in human-input tool; user tools may not take it.
pub const ASK_HUMAN: &str = "ask_human";

/// What the model is told the tool does.
pub const DESCRIPTION: &str =
    "Ask the human user for input or clarification. The run pauses until the answer arrives.";

/// How the answer is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputType {
    /// A line of text (the default).
    Text,
    /// Hidden input; the answer is treated as sensitive.
    Password,
    /// yes or no.
    Confirmation,
}

impl InputType {
    /// Every input type, in the order they are documented.
    pub const ALL: [InputType; 3] = [
        InputType::Text,
        InputType::Password,
        InputType::Confirmation,
    ];

    /// The spelling the model writes, e.g. `password`.
    pub fn as_str(self) -> &'static str {
        match self {
            InputType::Text => "text",
            InputType::Password => "password",
            InputType::Confirmation => "confirmation",
        }
    }

    fn parse(text: &str) -> Option<InputType> {
        InputType::ALL.into_iter().find(|t| t.as_str() == text)
    }
}

/// One parameter of the built-in tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuiltinParameter {
    /// The argument's key.
    pub name: &'static str,
    /// JSON-schema type name.
    pub param_type: &'static str,
    /// The model must give it.
    pub required: bool,
    /// What the model is told it means.
    pub description: &'static str,
    /// The accepted values, when the parameter is an enumeration.
    pub values: &'static [&'static str],
}

/// The parameters of `ask_human`, in the order they are documented.
pub const PARAMETERS: [BuiltinParameter; 3] = [
    BuiltinParameter {
        name: "prompt",
        param_type: "string",
        required: true,
        description: "The question to show the user (must not be empty)",
        values: &[],
    },
    BuiltinParameter {
        name: "input_type",
        param_type: "string",
        required: false,
        description: "Kind of answer expected: text (default), password (hidden, never logged), confirmation (yes/no)",
        values: &["text", "password", "confirmation"],
    },
    BuiltinParameter {
        name: "sensitive",
        param_type: "boolean",
        required: false,
        description: "true when the answer is secret: it is kept out of every log (default false; implied by input_type password)",
        values: &[],
    },
];

/// Validated arguments of one `ask_human` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AskHumanArgs {
    /// The question, not empty.
    pub prompt: String,
    /// How the answer is asked for (default text).
    pub input_type: InputType,
    /// Explicitly sensitive, or a password.
    pub sensitive: bool,
}

impl AskHumanArgs {
    /// The journal's `resolved_command` for the call.
    pub fn rendered(&self) -> String {
        format!("{ASK_HUMAN} {:?}", self.prompt)
    }
}

/// The built-in tool as an OpenAI function definition.
pub fn schema() -> Json {
    let mut properties = Map::new();
    for p in PARAMETERS {
        let mut property = Map::new();
        property.insert("type".into(), json!(p.param_type));
        if !p.values.is_empty() {
            property.insert("enum".into(), json!(p.values));
        }
        property.insert("description".into(), json!(p.description));
        properties.insert(p.name.into(), Json::Object(property));
    }
    let required: Vec<&str> = PARAMETERS
        .iter()
        .filter(|p| p.required)
        .map(|p| p.name)
        .collect();
    json!({
        "type": "function",
        "function": {
            "name": ASK_HUMAN,
            "description": DESCRIPTION,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": required,
            }
        }
    })
}

fn bad(message: String) -> ArgumentError {
    ArgumentError(message)
}

/// Validates the model's arguments object. `null` counts as absent, like for other tools.
/// `sensitive` also accepts the strings `"true"`/`"false"` (the original engine did).
pub(crate) fn parse(args: &Map<String, Json>) -> Result<AskHumanArgs, ArgumentError> {
    let known: Vec<&str> = PARAMETERS.iter().map(|p| p.name).collect();
    if let Some(unknown) = args.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(bad(format!(
            "unknown argument `{unknown}` for tool `{ASK_HUMAN}`; known parameters: {}",
            known.join(", ")
        )));
    }
    let given = |name: &str| args.get(name).filter(|v| !v.is_null());
    let prompt = match given("prompt") {
        None => {
            return Err(bad(format!(
                "missing required argument `prompt` (the question to show the user) for tool `{ASK_HUMAN}`"
            )))
        }
        Some(Json::String(text)) if text.trim().is_empty() => {
            return Err(bad(format!(
                "argument `prompt` of tool `{ASK_HUMAN}` must not be empty: write the question to show the user"
            )))
        }
        Some(Json::String(text)) => text.clone(),
        Some(other) => {
            return Err(bad(format!(
                "argument `prompt` of tool `{ASK_HUMAN}` must be text, got {other}"
            )))
        }
    };
    let input_type = match given("input_type") {
        None => InputType::Text,
        Some(Json::String(text)) => InputType::parse(text).ok_or_else(|| {
            bad(format!(
                "argument `input_type` of tool `{ASK_HUMAN}` must be one of text, password, confirmation; got \"{text}\""
            ))
        })?,
        Some(other) => {
            return Err(bad(format!(
                "argument `input_type` of tool `{ASK_HUMAN}` must be one of text, password, confirmation; got {other}"
            )))
        }
    };
    let sensitive = match given("sensitive") {
        None => false,
        Some(Json::Bool(b)) => *b,
        Some(Json::String(s)) if s == "true" => true,
        Some(Json::String(s)) if s == "false" => false,
        Some(other) => {
            return Err(bad(format!(
                "argument `sensitive` of tool `{ASK_HUMAN}` must be a boolean (true or false), got {other}"
            )))
        }
    };
    Ok(AskHumanArgs {
        prompt,
        input_type,
        sensitive: sensitive || input_type == InputType::Password,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn args(value: Json) -> Map<String, Json> {
        match value {
            Json::Object(map) => map,
            other => panic!("not an object: {other}"),
        }
    }

    fn error(value: Json) -> String {
        parse(&args(value)).unwrap_err().to_string()
    }

    #[test]
    fn a_prompt_alone_is_a_text_question() {
        let parsed = parse(&args(json!({"prompt": "Which colour?"}))).unwrap();
        assert_eq!(
            parsed,
            AskHumanArgs {
                prompt: "Which colour?".into(),
                input_type: InputType::Text,
                sensitive: false
            }
        );
        assert_eq!(parsed.rendered(), "ask_human \"Which colour?\"");
    }

    #[test]
    fn password_implies_sensitive_and_string_booleans_are_accepted() {
        let password = parse(&args(json!({"prompt": "PIN?", "input_type": "password"}))).unwrap();
        assert!(password.sensitive);
        assert_eq!(password.input_type, InputType::Password);
        let explicit = parse(&args(json!({"prompt": "x", "sensitive": "true"}))).unwrap();
        assert!(explicit.sensitive);
        let not = parse(&args(
            json!({"prompt": "x", "sensitive": false, "input_type": null}),
        ))
        .unwrap();
        assert!(!not.sensitive);
        assert_eq!(not.input_type, InputType::Text);
    }

    #[test]
    fn ask_human_with_a_wrong_key_is_an_error_naming_the_key() {
        let message = error(json!({"question": "Proceed?"}));
        assert!(message.contains("unknown argument `question`"), "{message}");
        assert!(
            message.contains("prompt, input_type, sensitive"),
            "{message}"
        );
    }

    #[test]
    fn missing_empty_or_non_text_prompt_is_an_error() {
        assert!(error(json!({})).contains("missing required argument `prompt`"));
        assert!(error(json!({"prompt": null})).contains("missing required argument `prompt`"));
        assert!(error(json!({"prompt": "  "})).contains("must not be empty"));
        assert!(error(json!({"prompt": 3})).contains("must be text"));
    }

    #[test]
    fn bad_input_type_or_sensitive_is_an_error_listing_what_is_accepted() {
        let message = error(json!({"prompt": "x", "input_type": "secret"}));
        assert!(
            message.contains("text, password, confirmation"),
            "{message}"
        );
        assert!(message.contains("\"secret\""), "{message}");
        assert!(error(json!({"prompt": "x", "input_type": 1})).contains("input_type"));
        let message = error(json!({"prompt": "x", "sensitive": "yes"}));
        assert!(message.contains("`sensitive`"), "{message}");
    }

    #[test]
    fn schema_lists_every_parameter_with_its_description() {
        let schema = schema();
        let properties = &schema["function"]["parameters"]["properties"];
        for p in PARAMETERS {
            assert_eq!(properties[p.name]["type"], p.param_type);
            assert_eq!(properties[p.name]["description"], p.description);
        }
        assert_eq!(
            schema["function"]["parameters"]["required"],
            json!(["prompt"])
        );
        assert_eq!(
            properties["input_type"]["enum"],
            json!(["text", "password", "confirmation"])
        );
    }
}
