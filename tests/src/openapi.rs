//! The lease API's contract, `docs/api/openapi.yaml`, read so a test can hold a running server
//! to it: each documented response's schema, and a check of a JSON value against one.
//!
//! The checker knows the part of JSON Schema the file uses (`type`, with `"null"` in a list,
//! `enum`, `required`, `properties`, `additionalProperties: false`, `items`, `minimum`, local
//! `$ref`) and refuses a schema with any other keyword, so that a schema it cannot check fails
//! the test instead of passing it.

use std::collections::BTreeSet;
use std::path::PathBuf;

use anyhow::{Context, bail};
use serde_json::Value;

/// Keywords the checker understands; `description` is prose.
const KNOWN: [&str; 9] = [
    "type",
    "enum",
    "required",
    "properties",
    "additionalProperties",
    "items",
    "minimum",
    "description",
    "$ref",
];

/// The OpenAPI document.
#[derive(Debug)]
pub struct Contract {
    /// The document as JSON.
    doc: Value,
}

/// One documented response.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Documented {
    /// The path template, `/v1/leases/{name}`.
    pub path: String,
    /// The status code.
    pub status: u16,
}

impl Contract {
    /// Reads `docs/api/openapi.yaml` from the repository.
    pub fn load() -> anyhow::Result<Contract> {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/api/openapi.yaml");
        let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
        let doc: Value = serde_norway::from_str(&text).context("openapi.yaml")?;
        Ok(Contract { doc })
    }

    /// Every documented GET response.
    pub fn responses(&self) -> Vec<Documented> {
        let mut all = Vec::new();
        for (path, item) in self.doc["paths"].as_object().into_iter().flatten() {
            for status in item["get"]["responses"].as_object().into_iter().flatten() {
                if let Ok(status) = status.0.parse() {
                    all.push(Documented {
                        path: path.clone(),
                        status,
                    });
                }
            }
        }
        all.sort();
        all
    }

    /// The response `status` of `GET path`: its one content type and schema.
    pub fn response(&self, path: &str, status: u16) -> anyhow::Result<(String, Value)> {
        let response = &self.doc["paths"][path]["get"]["responses"][status.to_string()];
        let content = response["content"]
            .as_object()
            .with_context(|| format!("GET {path} {status} is not documented"))?;
        let (kind, body) = content
            .iter()
            .next()
            .with_context(|| format!("GET {path} {status} has no content"))?;
        Ok((kind.clone(), body["schema"].clone()))
    }

    /// The event names documented for response `status` of `GET path` (`x-events`).
    pub fn events(&self, path: &str, status: u16) -> BTreeSet<String> {
        self.doc["paths"][path]["get"]["responses"][status.to_string()]["x-events"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e.as_str().map(str::to_string))
            .collect()
    }

    /// The named schema of `components/schemas`.
    pub fn schema(&self, name: &str) -> Value {
        serde_json::json!({ "$ref": format!("#/components/schemas/{name}") })
    }

    /// The properties `schema` (followed through its `$ref`) documents.
    pub fn properties(&self, schema: &Value) -> anyhow::Result<BTreeSet<String>> {
        let schema = self.resolve(schema)?;
        Ok(schema["properties"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, _)| k.clone())
            .collect())
    }

    /// Checks `value` against `schema`; the error names the path into the value at fault.
    pub fn check(&self, value: &Value, schema: &Value) -> anyhow::Result<()> {
        self.check_at(value, schema, "$")
    }

    fn resolve<'a>(&'a self, schema: &'a Value) -> anyhow::Result<&'a Value> {
        match schema.get("$ref").and_then(Value::as_str) {
            Some(reference) => {
                let pointer = reference
                    .strip_prefix('#')
                    .with_context(|| format!("only local $refs: {reference}"))?;
                self.doc
                    .pointer(pointer)
                    .with_context(|| format!("$ref {reference} points nowhere"))
            }
            None => Ok(schema),
        }
    }

    fn check_at(&self, value: &Value, schema: &Value, at: &str) -> anyhow::Result<()> {
        let schema = self.resolve(schema)?;
        let Some(keywords) = schema.as_object() else {
            bail!("{at}: the schema is not an object: {schema}");
        };
        if let Some(unknown) = keywords.keys().find(|k| !KNOWN.contains(&k.as_str())) {
            bail!("{at}: the checker does not know the keyword {unknown:?}");
        }
        if let Some(kinds) = schema.get("type") {
            let kinds: Vec<&str> = match kinds {
                Value::String(k) => vec![k.as_str()],
                Value::Array(ks) => ks.iter().filter_map(Value::as_str).collect(),
                _ => bail!("{at}: type is neither a string nor a list"),
            };
            let fits = |kind: &str| match kind {
                "null" => value.is_null(),
                "string" => value.is_string(),
                "boolean" => value.is_boolean(),
                "integer" => value.is_i64() || value.is_u64(),
                "number" => value.is_number(),
                "object" => value.is_object(),
                "array" => value.is_array(),
                _ => false,
            };
            if !kinds.iter().any(|k| fits(k)) {
                bail!("{at}: {value} is not of type {kinds:?}");
            }
        }
        if let Some(choices) = schema.get("enum").and_then(Value::as_array)
            && !choices.contains(value)
        {
            bail!("{at}: {value} is not one of {choices:?}");
        }
        if let (Some(minimum), Some(n)) = (
            schema.get("minimum").and_then(Value::as_f64),
            value.as_f64(),
        ) && n < minimum
        {
            bail!("{at}: {n} is below the minimum {minimum}");
        }
        if let Some(object) = value.as_object() {
            let properties = schema["properties"].as_object();
            for required in schema["required"].as_array().into_iter().flatten() {
                let name = required.as_str().unwrap_or_default();
                if !object.contains_key(name) {
                    bail!("{at}: the required field {name:?} is missing from {value}");
                }
            }
            for (name, field) in object {
                match properties.and_then(|p| p.get(name)) {
                    Some(field_schema) => {
                        self.check_at(field, field_schema, &format!("{at}.{name}"))?
                    }
                    None if schema["additionalProperties"] == Value::Bool(false) => {
                        bail!("{at}: the field {name:?} is not documented")
                    }
                    None => {}
                }
            }
        }
        if let (Some(items), Some(array)) = (schema.get("items"), value.as_array()) {
            for (i, item) in array.iter().enumerate() {
                self.check_at(item, items, &format!("{at}[{i}]"))?;
            }
        }
        Ok(())
    }
}
