//! The options inside `#[kernel(...)]`: length relations, `no_wait`, `debug`, `module = path`.

use proc_macro2::{Span, TokenStream};
use syn::parse::{Parse, ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::{Ident, Path, Token, parenthesized};

/// What the attribute's arguments asked for.
#[derive(Default)]
pub struct Options {
    /// `len(a) OP len(b)` relations, checked by the launcher before anything reaches a GPU.
    pub len_relations: Vec<LenRelation>,
    /// `no_wait`: the kernel never waits on other blocks or ranks, so the runtime may launch a grid larger
    /// than what fits on the GPU at once.
    pub no_wait: bool,
    /// `debug`: print the expansion while compiling.
    pub debug: bool,
    /// `module = path`: the `KernelModule` static holding the kernel's PTX, instead of
    /// `crate::__FERROCOMM_MODULE` (what `ferrocomm::kernel_module!()` defines).
    pub module: Option<Path>,
}

/// `len(lhs) op len(rhs)`.
pub struct LenRelation {
    /// The argument on the left.
    pub lhs: Ident,
    /// The comparison.
    pub op: LenOp,
    /// The argument on the right.
    pub rhs: Ident,
}

/// The comparisons a length relation may use.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum LenOp {
    /// `==`
    Eq,
    /// `<=`
    Le,
    /// `>=`
    Ge,
}

impl LenOp {
    /// The operator as written.
    pub fn as_str(self) -> &'static str {
        match self {
            LenOp::Eq => "==",
            LenOp::Le => "<=",
            LenOp::Ge => ">=",
        }
    }
}

impl LenRelation {
    /// The relation as the user wrote it, normalised (`len(dst) == len(src)`), for messages.
    pub fn text(&self) -> String {
        format!("len({}) {} len({})", self.lhs, self.op.as_str(), self.rhs)
    }
}

/// One comma-separated entry of the attribute.
enum Entry {
    Len(LenRelation),
    NoWait(Ident),
    Debug(Ident),
    Module(Ident, Path),
}

const EXPECTED: &str = "expected one of: `len(a) == len(b)` (also `<=`, `>=`), `no_wait`, `debug`, `module = path`";

fn parse_len_call(input: ParseStream<'_>) -> syn::Result<Ident> {
    let kw: Ident = input.parse()?;
    if kw != "len" {
        return Err(syn::Error::new(kw.span(), format!("expected `len(<argument>)`, found `{kw}`")));
    }
    let content;
    parenthesized!(content in input);
    let arg: Ident = content.parse()?;
    if !content.is_empty() {
        return Err(content.error("`len(...)` takes the name of one kernel argument"));
    }
    Ok(arg)
}

impl Parse for Entry {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let ident: Ident = input.fork().parse().map_err(|e| syn::Error::new(e.span(), EXPECTED))?;
        if ident == "len" && input.peek2(syn::token::Paren) {
            let lhs = parse_len_call(input)?;
            let op = if input.peek(Token![==]) {
                input.parse::<Token![==]>()?;
                LenOp::Eq
            } else if input.peek(Token![<=]) {
                input.parse::<Token![<=]>()?;
                LenOp::Le
            } else if input.peek(Token![>=]) {
                input.parse::<Token![>=]>()?;
                LenOp::Ge
            } else {
                return Err(input.error("expected `==`, `<=` or `>=` between two `len(...)`"));
            };
            let rhs = parse_len_call(input)?;
            return Ok(Entry::Len(LenRelation { lhs, op, rhs }));
        }
        input.parse::<Ident>()?;
        match ident.to_string().as_str() {
            "no_wait" => Ok(Entry::NoWait(ident)),
            "debug" => Ok(Entry::Debug(ident)),
            "module" => {
                input.parse::<Token![=]>()?;
                Ok(Entry::Module(ident, input.parse()?))
            }
            other => Err(syn::Error::new(ident.span(), format!("unknown `#[kernel]` option `{other}`; {EXPECTED}"))),
        }
    }
}

/// Parses the attribute's tokens (empty for a bare `#[kernel]`).
pub fn parse_options(attr: TokenStream) -> syn::Result<Options> {
    let entries = Punctuated::<Entry, Token![,]>::parse_terminated.parse2(attr)?;
    let mut options = Options::default();
    let mut seen: Vec<(String, Span)> = Vec::new();
    let mut once = |name: &str, ident: &Ident| -> syn::Result<()> {
        if seen.iter().any(|(n, _)| n == name) {
            return Err(syn::Error::new(ident.span(), format!("`{name}` is given twice")));
        }
        seen.push((name.to_string(), ident.span()));
        Ok(())
    };
    for entry in entries {
        match entry {
            Entry::Len(rel) => options.len_relations.push(rel),
            Entry::NoWait(ident) => {
                once("no_wait", &ident)?;
                options.no_wait = true;
            }
            Entry::Debug(ident) => {
                once("debug", &ident)?;
                options.debug = true;
            }
            Entry::Module(ident, path) => {
                once("module", &ident)?;
                options.module = Some(path);
            }
        }
    }
    Ok(options)
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    #[test]
    fn empty_is_default() {
        let o = parse_options(quote!()).unwrap();
        assert!(o.len_relations.is_empty() && !o.no_wait && !o.debug && o.module.is_none());
    }

    #[test]
    fn all_options() {
        let o = parse_options(quote!(
            len(dst) == len(src),
            len(a) <= len(b),
            len(c) >= len(d),
            no_wait,
            debug,
            module = crate::kernels::MODULE
        ))
        .unwrap();
        let rels: Vec<String> = o.len_relations.iter().map(LenRelation::text).collect();
        assert_eq!(rels, ["len(dst) == len(src)", "len(a) <= len(b)", "len(c) >= len(d)"]);
        assert!(o.no_wait && o.debug);
        let m = o.module.unwrap();
        assert_eq!(quote!(#m).to_string(), "crate :: kernels :: MODULE");
    }

    #[test]
    fn trailing_comma_is_fine() {
        assert!(parse_options(quote!(no_wait,)).unwrap().no_wait);
    }

    fn err(tokens: TokenStream) -> String {
        match parse_options(tokens) {
            Ok(_) => panic!("expected an error"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn errors_name_the_fix() {
        assert!(err(quote!(nowait)).contains("unknown `#[kernel]` option `nowait`"));
        assert!(err(quote!(no_wait, no_wait)).contains("`no_wait` is given twice"));
        assert!(err(quote!(len(a) < len(b))).contains("expected `==`, `<=` or `>=`"));
        assert!(err(quote!(len(a) == size(b))).contains("expected `len(<argument>)`, found `size`"));
        assert!(err(quote!(len(a, b) == len(c))).contains("takes the name of one kernel argument"));
        assert!(err(quote!(module)).contains("expected `=`"));
        assert!(err(quote!("debug")).contains("expected one of"));
    }
}
