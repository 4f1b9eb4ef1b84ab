//! The server's questions, asked in the terminal: an `elicitation/create` in form mode becomes
//! a choice (answer, decline or cancel) and then one prompt per field of its
//! `requestedSchema`: a string (free text), a number or an integer (checked as typed), a
//! boolean (yes/no), or an enumeration (`enum`, or `oneOf` of `const`s with titles: a list to
//! pick from). A required field must be given; an optional one may be left empty.
//!
//! What the form yields is the elicitation's result: `{action: "accept", content}`,
//! `{action: "decline"}` or `{action: "cancel"}`. How a field's text becomes its value is
//! [`parse_field`], a pure function. Without a terminal on standard input nothing can be
//! asked, and the answer is `cancel`.

use console::Term;
use dialoguer::theme::ColorfulTheme;
use dialoguer::{Confirm, Input, Select};
use serde_json::{json, Map, Value};

/// What kind of value a field takes.
#[derive(Debug, Clone, PartialEq)]
pub enum Field {
    /// Free text.
    Text,
    /// A number.
    Number,
    /// A whole number.
    Integer,
    /// Yes or no.
    Boolean,
    /// One of these values, each with the label shown.
    Choice(Vec<(Value, String)>),
}

impl Field {
    /// The kind of the property schema `p`.
    pub fn of(p: &Value) -> Field {
        if let Some(values) = p["enum"].as_array() {
            let names = p["enumNames"].as_array();
            return Field::Choice(
                values
                    .iter()
                    .enumerate()
                    .map(|(i, v)| {
                        let label = names
                            .and_then(|n| n.get(i))
                            .and_then(Value::as_str)
                            .map(str::to_string)
                            .unwrap_or_else(|| label_of(v));
                        (v.clone(), label)
                    })
                    .collect(),
            );
        }
        if let Some(options) = p["oneOf"].as_array() {
            return Field::Choice(
                options
                    .iter()
                    .filter_map(|o| {
                        let v = o.get("const")?.clone();
                        let label = o["title"]
                            .as_str()
                            .map_or_else(|| label_of(&v), str::to_string);
                        Some((v, label))
                    })
                    .collect(),
            );
        }
        match p["type"].as_str() {
            Some("number") => Field::Number,
            Some("integer") => Field::Integer,
            Some("boolean") => Field::Boolean,
            _ => Field::Text,
        }
    }
}

fn label_of(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_string)
}

/// The value typed text `s` gives a field of kind `field` (not a choice); why not when it does
/// not fit.
pub fn parse_field(field: &Field, s: &str) -> Result<Value, String> {
    let s = s.trim();
    match field {
        Field::Text => Ok(json!(s)),
        Field::Number => s
            .parse::<f64>()
            .ok()
            .filter(|n| n.is_finite())
            .map(|n| json!(n))
            .ok_or_else(|| format!("{s:?} is not a number")),
        Field::Integer => s
            .parse::<i64>()
            .map(|n| json!(n))
            .map_err(|_| format!("{s:?} is not a whole number")),
        Field::Boolean => match s.to_ascii_lowercase().as_str() {
            "y" | "yes" | "true" => Ok(json!(true)),
            "n" | "no" | "false" => Ok(json!(false)),
            _ => Err(format!("{s:?} is not yes or no")),
        },
        Field::Choice(_) => Err("a choice is picked, not typed".into()),
    }
}

/// Whether questions can be asked: standard input and standard error are terminals.
pub fn can_ask() -> bool {
    Term::stderr().is_term()
        && console::user_attended_stderr()
        && std::io::IsTerminal::is_terminal(&std::io::stdin())
}

/// Ask elicitation `params` in the terminal (blocking); the elicitation's result.
pub fn elicit(params: &Value) -> Value {
    if !can_ask() {
        eprintln!("the server asks a question, but there is no terminal to ask it on: cancelled");
        return json!({ "action": "cancel" });
    }
    match ask_form(params) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("the question could not be asked ({e}): cancelled");
            json!({ "action": "cancel" })
        }
    }
}

fn ask_form(params: &Value) -> Result<Value, dialoguer::Error> {
    let theme = ColorfulTheme::default();
    let term = Term::stderr();
    let message = params["message"].as_str().unwrap_or("The server asks:");
    if params["mode"] == "url" {
        let url = params["url"].as_str().unwrap_or_default();
        term.write_line(&format!("{message}\nOpen {url} to answer."))?;
        let go = Confirm::with_theme(&theme)
            .with_prompt("Done?")
            .default(true)
            .interact_on(&term)?;
        return Ok(json!({ "action": if go { "accept" } else { "decline" } }));
    }
    let action = Select::with_theme(&theme)
        .with_prompt(message)
        .items(["Answer", "Decline", "Cancel"])
        .default(0)
        .interact_on_opt(&term)?;
    match action {
        Some(0) => {}
        Some(1) => return Ok(json!({ "action": "decline" })),
        _ => return Ok(json!({ "action": "cancel" })),
    }
    let schema = &params["requestedSchema"];
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut content = Map::new();
    if let Some(props) = schema["properties"].as_object() {
        for (name, p) in props {
            let must = required.contains(&name.as_str());
            let title = p["title"].as_str().unwrap_or(name);
            let prompt = match p["description"].as_str() {
                Some(d) => format!("{title} ({d})"),
                None => title.to_string(),
            };
            if let Some(v) = ask_field(&theme, &term, &prompt, &Field::of(p), p, must)? {
                content.insert(name.clone(), v);
            }
        }
    }
    Ok(json!({ "action": "accept", "content": content }))
}

/// One field; `None` when an optional field was left empty.
fn ask_field(
    theme: &ColorfulTheme,
    term: &Term,
    prompt: &str,
    field: &Field,
    schema: &Value,
    must: bool,
) -> Result<Option<Value>, dialoguer::Error> {
    match field {
        Field::Boolean => {
            let mut c = Confirm::with_theme(theme).with_prompt(prompt);
            if let Some(d) = schema["default"].as_bool() {
                c = c.default(d);
            }
            Ok(Some(json!(c.interact_on(term)?)))
        }
        Field::Choice(options) => {
            let labels: Vec<&str> = options.iter().map(|(_, l)| l.as_str()).collect();
            let default = options
                .iter()
                .position(|(v, _)| Some(v) == schema.get("default"))
                .unwrap_or(0);
            let picked = Select::with_theme(theme)
                .with_prompt(prompt)
                .items(&labels)
                .default(default)
                .interact_on(term)?;
            Ok(options.get(picked).map(|(v, _)| v.clone()))
        }
        kind => {
            let kind_for_check = kind.clone();
            let mut input = Input::<String>::with_theme(theme)
                .with_prompt(prompt)
                .allow_empty(!must)
                .validate_with(move |s: &String| -> Result<(), String> {
                    if s.trim().is_empty() {
                        return if must {
                            Err("an answer is required".into())
                        } else {
                            Ok(())
                        };
                    }
                    parse_field(&kind_for_check, s).map(drop)
                });
            if let Some(d) = schema.get("default") {
                input = input.default(label_of(d));
            }
            let text = input.interact_text_on(term)?;
            if text.trim().is_empty() {
                return Ok(None);
            }
            parse_field(kind, &text).map(Some).map_err(|e| {
                dialoguer::Error::IO(std::io::Error::new(std::io::ErrorKind::InvalidInput, e))
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_read_from_their_schema() {
        assert_eq!(Field::of(&json!({"type": "string"})), Field::Text);
        assert_eq!(Field::of(&json!({"type": "integer"})), Field::Integer);
        assert_eq!(Field::of(&json!({"type": "number"})), Field::Number);
        assert_eq!(Field::of(&json!({"type": "boolean"})), Field::Boolean);
        assert_eq!(
            Field::of(
                &json!({"type": "string", "enum": ["r", "g"], "enumNames": ["Red", "Green"]})
            ),
            Field::Choice(vec![
                (json!("r"), "Red".into()),
                (json!("g"), "Green".into())
            ])
        );
        assert_eq!(
            Field::of(&json!({"oneOf": [{"const": "a", "title": "A"}, {"const": "b"}]})),
            Field::Choice(vec![(json!("a"), "A".into()), (json!("b"), "b".into())])
        );
    }

    #[test]
    fn typed_text_becomes_the_field_value() {
        assert_eq!(parse_field(&Field::Text, " Ada "), Ok(json!("Ada")));
        assert_eq!(parse_field(&Field::Number, "2.5"), Ok(json!(2.5)));
        assert!(parse_field(&Field::Number, "two").is_err());
        assert!(parse_field(&Field::Number, "NaN").is_err());
        assert_eq!(parse_field(&Field::Integer, "42"), Ok(json!(42)));
        assert!(parse_field(&Field::Integer, "4.2").is_err());
        assert_eq!(parse_field(&Field::Boolean, "Yes"), Ok(json!(true)));
        assert_eq!(parse_field(&Field::Boolean, "false"), Ok(json!(false)));
        assert!(parse_field(&Field::Boolean, "maybe").is_err());
    }
}
