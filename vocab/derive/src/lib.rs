//! `#[derive(Coded)]`, used as `vocab::Coded`: an error enum's wire codes, spelled once in its
//! `#[error("CODE: …")]` messages. The `vocab` crate documents the attribute; this crate only
//! expands it (it depends on nothing but `syn`, `quote` and `proc-macro2`, so the read-only MCP
//! server may use it).
#![forbid(unsafe_code)]

use proc_macro::TokenStream;
use proc_macro2::TokenStream as TokenStream2;
use quote::{format_ident, quote};
use syn::{Attribute, Data, DeriveInput, Fields, Ident, LitStr, Path, parse_macro_input};

/// Generates `CODES`, `code()`, `impl vocab::Coded` and `impl vocab::CodedEnum` for an error
/// enum (see the `vocab` crate's documentation).
#[proc_macro_derive(Coded, attributes(coded))]
pub fn derive_coded(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// A variant's failure class, as `#[coded(…)]` gives it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Rejected,
    Usage,
    Environment,
    /// The wrapped error's class, with its usage errors reported as rejections.
    UsageAsRejected,
}

/// Where a variant's code comes from.
enum Source {
    /// The message's prefix: the enum's own code, listed in `CODES`.
    Message,
    /// `code = PATH`: the crate's named constant (listed); it must equal the message's prefix.
    Const(Path),
    /// `foreign = PATH`: another crate's code (not listed); it must equal the message's prefix.
    Foreign(Path),
    /// `field = name`: a `&'static str` field holds it (not listed).
    Field(Ident),
    /// `#[error(transparent)]` or `#[coded(delegate)]`: the one wrapped error's code and class.
    Wrapped,
}

struct Variant<'a> {
    ident: &'a Ident,
    fields: &'a Fields,
    source: Source,
    class: Option<Class>,
    /// The code the message starts with (`Message`, `Const`, `Foreign`).
    code: Option<String>,
}

/// The `#[error(…)]` attribute: a message literal, or `transparent`.
enum Message {
    Literal(LitStr),
    Transparent,
}

fn error_attribute(attrs: &[Attribute], ident: &Ident) -> syn::Result<Message> {
    let Some(attr) = attrs.iter().find(|a| a.path().is_ident("error")) else {
        return Err(syn::Error::new(
            ident.span(),
            "#[derive(Coded)]: every variant needs #[error(\"CODE: …\")] or #[error(transparent)]",
        ));
    };
    attr.parse_args_with(|input: syn::parse::ParseStream<'_>| {
        if input.peek(LitStr) {
            let literal: LitStr = input.parse()?;
            let _arguments: TokenStream2 = input.parse()?;
            return Ok(Message::Literal(literal));
        }
        let word: Ident = input.parse()?;
        if word == "transparent" && input.is_empty() {
            Ok(Message::Transparent)
        } else {
            Err(syn::Error::new(
                word.span(),
                "#[derive(Coded)]: expected #[error(\"CODE: …\")] or #[error(transparent)]",
            ))
        }
    })
}

/// `CODE` of a message `CODE: …`, when `CODE` is an UPPER_SNAKE code (`A-Z`, `0-9`, single `_`
/// between parts, a letter first) and `": "` follows it.
fn message_code(message: &str) -> Option<&str> {
    let (code, rest) = message.split_once(':')?;
    let upper_snake = code.starts_with(|c: char| c.is_ascii_uppercase())
        && code.split('_').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
        });
    (upper_snake && rest.starts_with(' ')).then_some(code)
}

fn parse_variant(variant: &syn::Variant) -> syn::Result<Variant<'_>> {
    let message = error_attribute(&variant.attrs, &variant.ident)?;
    let mut source = None;
    let mut class = None;
    for attr in variant.attrs.iter().filter(|a| a.path().is_ident("coded")) {
        attr.parse_nested_meta(|meta| {
            let set_source = |source: &mut Option<Source>, value: Source| {
                if source.replace(value).is_some() {
                    return Err(
                        meta.error("#[coded]: give at most one of code, foreign, field, delegate")
                    );
                }
                Ok(())
            };
            let set_class = |class: &mut Option<Class>, value: Class| {
                if class.replace(value).is_some() {
                    return Err(meta.error("#[coded]: give at most one class"));
                }
                Ok(())
            };
            if meta.path.is_ident("code") {
                set_source(&mut source, Source::Const(meta.value()?.parse()?))
            } else if meta.path.is_ident("foreign") {
                set_source(&mut source, Source::Foreign(meta.value()?.parse()?))
            } else if meta.path.is_ident("field") {
                set_source(&mut source, Source::Field(meta.value()?.parse()?))
            } else if meta.path.is_ident("delegate") {
                set_source(&mut source, Source::Wrapped)
            } else if meta.path.is_ident("rejected") {
                set_class(&mut class, Class::Rejected)
            } else if meta.path.is_ident("usage") {
                set_class(&mut class, Class::Usage)
            } else if meta.path.is_ident("environment") {
                set_class(&mut class, Class::Environment)
            } else if meta.path.is_ident("usage_as_rejected") {
                set_class(&mut class, Class::UsageAsRejected)
            } else {
                Err(meta.error(
                    "#[coded]: expected code = PATH, foreign = PATH, field = NAME, delegate, \
                     rejected, usage, environment or usage_as_rejected",
                ))
            }
        })?;
    }
    let source = match (message, source) {
        (Message::Transparent, None) => Source::Wrapped,
        (Message::Transparent, Some(_)) => {
            return Err(syn::Error::new(
                variant.ident.span(),
                "#[coded]: an #[error(transparent)] variant takes its wrapped error's code",
            ));
        }
        (Message::Literal(_), Some(Source::Wrapped)) => Source::Wrapped,
        (Message::Literal(literal), Some(Source::Field(field))) => {
            let named = variant
                .fields
                .iter()
                .any(|f| f.ident.as_ref() == Some(&field));
            if !named || !literal.value().starts_with(&format!("{{{field}}}: ")) {
                return Err(syn::Error::new(
                    literal.span(),
                    format!(
                        "#[coded(field = {field})]: the message must start with \"{{{field}}}: \""
                    ),
                ));
            }
            Source::Field(field)
        }
        (Message::Literal(literal), source) => {
            let value = literal.value();
            let Some(code) = message_code(&value) else {
                return Err(syn::Error::new(
                    literal.span(),
                    "#[derive(Coded)]: the message must start with an UPPER_SNAKE code and \": \"",
                ));
            };
            let source = source.unwrap_or(Source::Message);
            return finish(variant, source, class, Some(code.to_owned()));
        }
    };
    finish(variant, source, class, None)
}

fn finish(
    variant: &syn::Variant,
    source: Source,
    class: Option<Class>,
    code: Option<String>,
) -> syn::Result<Variant<'_>> {
    let wrapped = matches!(source, Source::Wrapped);
    if wrapped && variant.fields.len() != 1 {
        return Err(syn::Error::new(
            variant.ident.span(),
            "#[derive(Coded)]: a wrapping variant holds exactly one field, the wrapped error",
        ));
    }
    if class == Some(Class::UsageAsRejected) && !wrapped {
        return Err(syn::Error::new(
            variant.ident.span(),
            "#[coded(usage_as_rejected)] applies to a wrapped error only",
        ));
    }
    Ok(Variant {
        ident: &variant.ident,
        fields: &variant.fields,
        source,
        class,
        code,
    })
}

/// The pattern that binds a wrapping variant's one field as `inner`.
fn inner_pattern(variant: &Variant<'_>) -> TokenStream2 {
    let ident = variant.ident;
    match variant.fields.iter().next().and_then(|f| f.ident.as_ref()) {
        Some(field) => quote!(Self::#ident { #field: inner }),
        None => quote!(Self::#ident(inner)),
    }
}

fn expand(input: &DeriveInput) -> syn::Result<TokenStream2> {
    let Data::Enum(data) = &input.data else {
        return Err(syn::Error::new(
            input.ident.span(),
            "#[derive(Coded)] applies to an error enum",
        ));
    };
    let variants = data
        .variants
        .iter()
        .map(parse_variant)
        .collect::<syn::Result<Vec<_>>>()?;
    let name = &input.ident;
    let (impl_generics, type_generics, where_clause) = input.generics.split_for_impl();

    let mut codes: Vec<&str> = Vec::new();
    let mut code_arms = Vec::new();
    let mut class_arms = Vec::new();
    let mut index_arms = Vec::new();
    let mut own_arms = Vec::new();
    let mut checks = Vec::new();
    for (index, v) in variants.iter().enumerate() {
        let ident = v.ident;
        let any = quote!(Self::#ident { .. });
        let own = matches!(v.source, Source::Message | Source::Const(_));
        if let (true, Some(code)) = (own, v.code.as_deref())
            && !codes.contains(&code)
        {
            codes.push(code);
        }
        code_arms.push(match &v.source {
            Source::Message => {
                let code = v.code.as_deref().unwrap_or_default();
                quote!(#any => #code,)
            }
            Source::Const(path) | Source::Foreign(path) => {
                let code = v.code.as_deref().unwrap_or_default();
                let why = format!(
                    "#[derive(Coded)]: {name}::{ident}: the constant is not the message's code {code}"
                );
                checks.push(quote! {
                    const _: () = ::core::assert!(::vocab::__private::str_eq(#path, #code), #why);
                });
                quote!(#any => #path,)
            }
            Source::Field(field) => quote!(Self::#ident { #field, .. } => #field,),
            Source::Wrapped => {
                let pattern = inner_pattern(v);
                quote!(#pattern => ::vocab::Coded::code(inner),)
            }
        });
        let class = |c: Class| match c {
            Class::Rejected | Class::UsageAsRejected => quote!(::vocab::FailureClass::Rejected),
            Class::Usage => quote!(::vocab::FailureClass::Usage),
            Class::Environment => quote!(::vocab::FailureClass::Environment),
        };
        class_arms.push(match (&v.source, v.class) {
            (Source::Wrapped, Some(Class::UsageAsRejected)) => {
                let pattern = inner_pattern(v);
                quote!(#pattern => match ::vocab::Coded::class(inner) {
                    ::vocab::FailureClass::Usage => ::vocab::FailureClass::Rejected,
                    other => other,
                },)
            }
            (Source::Wrapped, None) => {
                let pattern = inner_pattern(v);
                quote!(#pattern => ::vocab::Coded::class(inner),)
            }
            (_, c) => {
                let c = class(c.unwrap_or(Class::Rejected));
                quote!(#any => #c,)
            }
        });
        index_arms.push(quote!(#any => #index,));
        own_arms.push(quote!(#any => #own,));
    }
    let count = variants.len();
    let codes_doc = format!(
        "Every code [`{name}::code`] returns for the enum's own variants, each once, in \
         declaration order (wrapped errors, other crates' codes and codes held in a field are \
         left out). Generated by `#[derive(vocab::Coded)]` from the `#[error(\"CODE: …\")]` \
         messages."
    );
    // The inherent method and the trait's share the name; it is spelled once, here.
    let code_fn = format_ident!("code");
    Ok(quote! {
        #[automatically_derived]
        impl #impl_generics #name #type_generics #where_clause {
            #[doc = #codes_doc]
            pub const CODES: &'static [&'static str] = &[#(#codes),*];

            /// The stable wire code: the prefix of the message before `": "` (or the constant the
            /// variant names); a wrapped error keeps its own crate's code.
            #[must_use]
            pub fn #code_fn(&self) -> &'static str {
                match self {
                    #(#code_arms)*
                }
            }
        }

        #[automatically_derived]
        impl #impl_generics ::vocab::Coded for #name #type_generics #where_clause {
            fn #code_fn(&self) -> &'static str {
                <#name #type_generics>::#code_fn(self)
            }

            fn class(&self) -> ::vocab::FailureClass {
                match self {
                    #(#class_arms)*
                }
            }
        }

        #[automatically_derived]
        impl #impl_generics ::vocab::CodedEnum for #name #type_generics #where_clause {
            const CODES: &'static [&'static str] = <#name #type_generics>::CODES;
            const VARIANTS: usize = #count;

            fn variant_index(&self) -> usize {
                match self {
                    #(#index_arms)*
                }
            }

            fn owns_code(&self) -> bool {
                match self {
                    #(#own_arms)*
                }
            }
        }

        #(#checks)*
    })
}

#[cfg(test)]
mod tests {
    use super::message_code;

    #[test]
    fn message_codes_are_upper_snake_and_followed_by_a_space() {
        assert_eq!(message_code("A_B: x"), Some("A_B"));
        assert_eq!(message_code("GATE_WIRE_JSON: {0}"), Some("GATE_WIRE_JSON"));
        assert_eq!(message_code("A2_B: x"), Some("A2_B"));
        for refused in [
            "a_b: x",
            "A__B: x",
            "_A: x",
            "A_: x",
            "A_B:x",
            "A_B x",
            "{code}: x",
            "2A: x",
            ": x",
        ] {
            assert_eq!(message_code(refused), None, "{refused}");
        }
    }
}
