//! The options inside `#[kernel(...)]`: relations the arguments must satisfy (`requires(...)`, or a bare
//! relation), `instances(...)` of a generic kernel, `bytes(...)` arguments, `no_wait`,
//! `launch_bounds(threads, blocks)`, `debug`, `module = path`.

use proc_macro2::{Span, TokenStream};
use syn::parse::{Parse, ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{BinOp, Expr, Ident, Path, Token, Type, parenthesized};

/// What the attribute's arguments asked for.
#[derive(Default)]
pub struct Options {
    /// Relations between arguments (`len(out) >= world() * len(src)`), checked by the launcher on every rank
    /// before anything reaches a GPU.
    pub relations: Vec<Relation>,
    /// `no_wait`: the kernel never waits on other blocks or ranks, so the runtime may launch a grid larger
    /// than what fits on the GPU at once.
    pub no_wait: bool,
    /// `debug`: print the expansion while compiling.
    pub debug: bool,
    /// `module = path`: the `KernelModule` static holding the kernel's PTX, instead of
    /// `crate::__FERROCOMM_MODULE` (what `ferrocomm::kernel_module!()` defines).
    pub module: Option<Path>,
    /// `instances(name<T>, ...)`: the PTX entries of a generic kernel, one per list of type arguments.
    pub instances: Vec<Instance>,
    /// Where `instances` was written (for errors about the list as a whole).
    pub instances_span: Option<Span>,
    /// `bytes(a, b)`: `u8` buffer arguments whose launcher takes a byte view of a buffer of any element type.
    pub bytes: Vec<Ident>,
    /// `launch_bounds(threads)` or `launch_bounds(threads, blocks)`: the most threads per block the kernel is
    /// launched with, and the blocks per multiprocessor ptxas must leave room for (PTX `.maxntid`,
    /// `.minnctapersm`: it then keeps registers to what that many blocks can share).
    pub launch_bounds: Option<LaunchBounds>,
}

/// `launch_bounds(threads, blocks)`, CUDA's `__launch_bounds__`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchBounds {
    /// Threads per block, at most (`.maxntid`), 1 ..= 1024.
    pub max_threads: u32,
    /// Blocks per multiprocessor to leave room for (`.minnctapersm`), at least 1 when given.
    pub min_blocks: Option<u32>,
}

/// `name<A, B>` in `instances(...)`: the PTX entry `name` runs the kernel with its type parameters set to
/// `A, B`.
pub struct Instance {
    /// The PTX entry's name (and the host module holding this instance's launcher).
    pub name: Ident,
    /// The type arguments, in the order of the kernel's type parameters.
    pub types: Vec<Type>,
}

/// `lhs op rhs`, a relation between arguments.
pub struct Relation {
    /// The left side.
    pub lhs: Term,
    /// The comparison.
    pub op: CmpOp,
    /// The right side.
    pub rhs: Term,
    /// Where it was written.
    pub span: Span,
}

/// An integer expression over the arguments.
pub enum Term {
    /// An integer literal.
    Lit(u128),
    /// `len(arg)`: the length of a buffer argument, in its elements (bytes for a `u8` buffer or view).
    Len(Ident),
    /// `world()`: ranks in the launching team.
    World,
    /// `arg` or `arg.field.field`: an integer argument, or an integer field of a by-value argument.
    Arg(Ident, Vec<Ident>),
    /// `a op b`.
    Binary(Box<Term>, ArithOp, Box<Term>),
    /// `(a)`, kept so the relation prints as written.
    Paren(Box<Term>),
}

/// The comparisons a relation may use.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CmpOp {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

/// The arithmetic a relation may use (on integers, checked: an overflow or a division by zero fails the
/// relation).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ArithOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%`
    Rem,
}

impl CmpOp {
    /// The operator as written.
    pub fn as_str(self) -> &'static str {
        match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }
}

impl ArithOp {
    /// The operator as written.
    pub fn as_str(self) -> &'static str {
        match self {
            ArithOp::Add => "+",
            ArithOp::Sub => "-",
            ArithOp::Mul => "*",
            ArithOp::Div => "/",
            ArithOp::Rem => "%",
        }
    }
}

impl Term {
    /// The term as written, normalised (`world() * len(src)`), for messages.
    pub fn text(&self) -> String {
        match self {
            Term::Lit(v) => v.to_string(),
            Term::Len(a) => format!("len({a})"),
            Term::World => "world()".into(),
            Term::Arg(a, fields) => {
                let mut s = a.to_string();
                for f in fields {
                    s.push('.');
                    s.push_str(&f.to_string());
                }
                s
            }
            Term::Binary(a, op, b) => format!("{} {} {}", a.text(), op.as_str(), b.text()),
            Term::Paren(t) => format!("({})", t.text()),
        }
    }

    /// The leaves that are not literals (`len(a)`, `world()`, `n`), left to right.
    pub fn leaves<'t>(&'t self, out: &mut Vec<&'t Term>) {
        match self {
            Term::Lit(_) => {}
            Term::Len(_) | Term::World | Term::Arg(..) => out.push(self),
            Term::Binary(a, _, b) => {
                a.leaves(out);
                b.leaves(out);
            }
            Term::Paren(t) => t.leaves(out),
        }
    }

    /// The argument a leaf names, if any.
    pub fn argument(&self) -> Option<&Ident> {
        match self {
            Term::Len(a) | Term::Arg(a, _) => Some(a),
            _ => None,
        }
    }
}

impl Relation {
    /// The relation as written, normalised (`len(out) >= world() * len(src)`), for messages.
    pub fn text(&self) -> String {
        format!("{} {} {}", self.lhs.text(), self.op.as_str(), self.rhs.text())
    }

    /// Every non-literal leaf of both sides, left to right.
    pub fn leaves(&self) -> Vec<&Term> {
        let mut out = Vec::new();
        self.lhs.leaves(&mut out);
        self.rhs.leaves(&mut out);
        out
    }
}

/// One comma-separated entry of the attribute.
enum Entry {
    Relation(Relation),
    Requires(Vec<Relation>),
    Instances(Ident, Vec<Instance>),
    Bytes(Vec<Ident>),
    NoWait(Ident),
    LaunchBounds(Ident, LaunchBounds),
    Debug(Ident),
    Module(Ident, Path),
}

const EXPECTED: &str = "expected one of: `requires(relation, ...)` (a relation such as `len(out) >= world() * \
                        len(src)`, also on its own), `instances(name<Type>, ...)`, `bytes(argument, ...)`, \
                        `no_wait`, `launch_bounds(threads, blocks)`, `debug`, `module = path`";

const TERMS: &str = "a relation compares two integer expressions made of `len(argument)`, `world()`, integer \
                     arguments (or their fields, `plan.len`), integer literals, `+ - * / %` and parentheses";

fn err<T>(span: Span, msg: impl Into<String>) -> syn::Result<T> {
    Err(syn::Error::new(span, msg.into()))
}

/// `lhs op rhs` from a parsed expression.
fn relation(expr: &Expr) -> syn::Result<Relation> {
    let Expr::Binary(b) = expr else {
        return err(expr.span(), format!("expected a comparison (`==`, `!=`, `<`, `<=`, `>`, `>=`): {TERMS}"));
    };
    let op = match b.op {
        BinOp::Eq(_) => CmpOp::Eq,
        BinOp::Ne(_) => CmpOp::Ne,
        BinOp::Lt(_) => CmpOp::Lt,
        BinOp::Le(_) => CmpOp::Le,
        BinOp::Gt(_) => CmpOp::Gt,
        BinOp::Ge(_) => CmpOp::Ge,
        _ => return err(b.op.span(), format!("expected a comparison (`==`, `!=`, `<`, `<=`, `>`, `>=`): {TERMS}")),
    };
    Ok(Relation { lhs: term(&b.left)?, op, rhs: term(&b.right)?, span: expr.span() })
}

/// An integer expression of a relation.
fn term(expr: &Expr) -> syn::Result<Term> {
    match expr {
        Expr::Binary(b) => {
            let op = match b.op {
                BinOp::Add(_) => ArithOp::Add,
                BinOp::Sub(_) => ArithOp::Sub,
                BinOp::Mul(_) => ArithOp::Mul,
                BinOp::Div(_) => ArithOp::Div,
                BinOp::Rem(_) => ArithOp::Rem,
                BinOp::Eq(_) | BinOp::Ne(_) | BinOp::Lt(_) | BinOp::Le(_) | BinOp::Gt(_) | BinOp::Ge(_) => {
                    return err(
                        b.op.span(),
                        format!("only one comparison per relation (write two relations instead): {TERMS}"),
                    );
                }
                other => {
                    let op = quote::ToTokens::to_token_stream(&other).to_string();
                    return err(b.op.span(), format!("`{op}` is not accepted in a relation: {TERMS}"));
                }
            };
            Ok(Term::Binary(Box::new(term(&b.left)?), op, Box::new(term(&b.right)?)))
        }
        Expr::Paren(p) => Ok(Term::Paren(Box::new(term(&p.expr)?))),
        Expr::Group(g) => term(&g.expr),
        Expr::Lit(l) => match &l.lit {
            syn::Lit::Int(i) => Ok(Term::Lit(i.base10_parse()?)),
            other => err(other.span(), format!("not an integer: {TERMS}")),
        },
        Expr::Call(c) => {
            let Expr::Path(f) = &*c.func else { return err(c.func.span(), TERMS) };
            let Some(name) = f.path.get_ident() else { return err(c.func.span(), TERMS) };
            match name.to_string().as_str() {
                "len" => {
                    let arg = match c.args.first() {
                        Some(Expr::Path(p)) if c.args.len() == 1 => p.path.get_ident().cloned(),
                        _ => None,
                    };
                    match arg {
                        Some(arg) => Ok(Term::Len(arg)),
                        None => err(c.span(), "`len(...)` takes the name of one kernel argument"),
                    }
                }
                "world" if c.args.is_empty() => Ok(Term::World),
                "world" => err(c.args.span(), "`world()` takes no arguments: it is the number of ranks of the team"),
                other => err(name.span(), format!("unknown function `{other}(...)` in a relation: {TERMS}")),
            }
        }
        Expr::Path(p) => match p.path.get_ident() {
            Some(id) if p.qself.is_none() => Ok(Term::Arg(id.clone(), Vec::new())),
            _ => err(p.span(), format!("expected the name of a kernel argument: {TERMS}")),
        },
        Expr::Field(f) => {
            let syn::Member::Named(field) = &f.member else {
                return err(f.member.span(), format!("name the field (`plan.len`): {TERMS}"));
            };
            match term(&f.base)? {
                Term::Arg(arg, mut fields) => {
                    fields.push(field.clone());
                    Ok(Term::Arg(arg, fields))
                }
                _ => err(f.base.span(), format!("fields are taken of kernel arguments only: {TERMS}")),
            }
        }
        other => err(other.span(), format!("not accepted in a relation: {TERMS}")),
    }
}

/// `name<A, B>`.
fn instance(input: ParseStream<'_>) -> syn::Result<Instance> {
    let name: Ident = input.parse()?;
    if !input.peek(Token![<]) {
        return Err(input.error(format!(
            "write the instance's type arguments after its name: `{name}<Type>` (the PTX entry `{name}` runs the \
             kernel with them)"
        )));
    }
    input.parse::<Token![<]>()?;
    let mut types = Vec::new();
    while !input.peek(Token![>]) {
        types.push(input.parse::<Type>()?);
        if input.peek(Token![>]) {
            break;
        }
        input.parse::<Token![,]>()?;
    }
    input.parse::<Token![>]>()?;
    if types.is_empty() {
        return err(name.span(), format!("instance `{name}<>` gives no type arguments"));
    }
    Ok(Instance { name, types })
}

impl Parse for Entry {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let keyword = input.fork().parse::<Ident>().ok().map(|i| i.to_string());
        let paren_next = input.peek2(syn::token::Paren);
        match keyword.as_deref() {
            Some("requires") if paren_next => {
                let ident: Ident = input.parse()?;
                let content;
                parenthesized!(content in input);
                let exprs = Punctuated::<Expr, Token![,]>::parse_terminated(&content)?;
                if exprs.is_empty() {
                    return err(ident.span(), "`requires()` lists no relation; remove it or add one");
                }
                Ok(Entry::Requires(exprs.iter().map(relation).collect::<syn::Result<_>>()?))
            }
            Some("instances") if paren_next => {
                let ident: Ident = input.parse()?;
                let content;
                parenthesized!(content in input);
                let list = Punctuated::<Instance, Token![,]>::parse_terminated_with(&content, instance)?;
                Ok(Entry::Instances(ident, list.into_iter().collect()))
            }
            Some("bytes") if paren_next => {
                input.parse::<Ident>()?;
                let content;
                parenthesized!(content in input);
                let list = Punctuated::<Ident, Token![,]>::parse_terminated(&content)?;
                Ok(Entry::Bytes(list.into_iter().collect()))
            }
            Some("no_wait") => Ok(Entry::NoWait(input.parse()?)),
            Some("launch_bounds") if paren_next => {
                let ident: Ident = input.parse()?;
                let content;
                parenthesized!(content in input);
                let list = Punctuated::<syn::LitInt, Token![,]>::parse_terminated(&content)?;
                Ok(Entry::LaunchBounds(ident.clone(), launch_bounds(&ident, &list)?))
            }
            Some("debug") => Ok(Entry::Debug(input.parse()?)),
            Some("module") => {
                let ident: Ident = input.parse()?;
                input.parse::<Token![=]>()?;
                Ok(Entry::Module(ident, input.parse()?))
            }
            _ => {
                let expr: Expr = input.parse().map_err(|e| syn::Error::new(e.span(), EXPECTED))?;
                match &expr {
                    Expr::Path(p) if p.path.get_ident().is_some() => {
                        let id = p.path.get_ident().unwrap();
                        err(id.span(), format!("unknown `#[kernel]` option `{id}`; {EXPECTED}"))
                    }
                    Expr::Binary(_) => Ok(Entry::Relation(relation(&expr)?)),
                    _ => err(expr.span(), EXPECTED),
                }
            }
        }
    }
}

/// `launch_bounds(threads)` or `launch_bounds(threads, blocks)`: 1 ..= 1024 threads, at least one block.
fn launch_bounds(ident: &Ident, list: &Punctuated<syn::LitInt, Token![,]>) -> syn::Result<LaunchBounds> {
    const FORM: &str = "write `launch_bounds(threads)` or `launch_bounds(threads, blocks_per_sm)` with integer \
                        literals: at most `threads` threads per block (1 ..= 1024), room for `blocks_per_sm` \
                        blocks on each multiprocessor";
    let values: Vec<(u32, Span)> =
        list.iter().map(|lit| Ok((lit.base10_parse::<u32>()?, lit.span()))).collect::<syn::Result<_>>()?;
    match values.as_slice() {
        [(threads, span), rest @ ..] if rest.len() <= 1 => {
            if !(1..=1024).contains(threads) {
                return err(*span, format!("{threads} threads per block; {FORM}"));
            }
            let min_blocks = match rest {
                [(0, span)] => return err(*span, format!("0 blocks per multiprocessor; {FORM}")),
                [(blocks, _)] => Some(*blocks),
                _ => None,
            };
            Ok(LaunchBounds { max_threads: *threads, min_blocks })
        }
        _ => err(ident.span(), FORM),
    }
}

/// Parses the attribute's tokens (empty for a bare `#[kernel]`).
pub fn parse_options(attr: TokenStream) -> syn::Result<Options> {
    let entries = Punctuated::<Entry, Token![,]>::parse_terminated.parse2(attr)?;
    let mut options = Options::default();
    let mut seen: Vec<String> = Vec::new();
    let mut once = |name: &str, ident: &Ident| -> syn::Result<()> {
        if seen.iter().any(|n| n == name) {
            return Err(syn::Error::new(ident.span(), format!("`{name}` is given twice")));
        }
        seen.push(name.to_string());
        Ok(())
    };
    for entry in entries {
        match entry {
            Entry::Relation(rel) => options.relations.push(rel),
            Entry::Requires(rels) => options.relations.extend(rels),
            Entry::Instances(ident, list) => {
                once("instances", &ident)?;
                options.instances_span = Some(ident.span());
                options.instances = list;
            }
            Entry::Bytes(list) => options.bytes.extend(list),
            Entry::NoWait(ident) => {
                once("no_wait", &ident)?;
                options.no_wait = true;
            }
            Entry::LaunchBounds(ident, bounds) => {
                once("launch_bounds", &ident)?;
                options.launch_bounds = Some(bounds);
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
        assert!(o.relations.is_empty() && !o.no_wait && !o.debug && o.module.is_none());
        assert!(o.instances.is_empty() && o.bytes.is_empty());
    }

    #[test]
    fn all_options() {
        let o = parse_options(quote!(
            len(dst) == len(src),
            len(a) <= len(b),
            requires(len(c) >= len(d), len(out) >= world() * len(src)),
            instances(k_f32<f32>, k_pair<u8, [u32; 4]>),
            bytes(src, dst),
            no_wait,
            launch_bounds(128, 4),
            debug,
            module = crate::kernels::MODULE
        ))
        .unwrap();
        assert_eq!(o.launch_bounds, Some(LaunchBounds { max_threads: 128, min_blocks: Some(4) }));
        let rels: Vec<String> = o.relations.iter().map(Relation::text).collect();
        assert_eq!(
            rels,
            ["len(dst) == len(src)", "len(a) <= len(b)", "len(c) >= len(d)", "len(out) >= world() * len(src)"]
        );
        assert!(o.no_wait && o.debug);
        let m = o.module.unwrap();
        assert_eq!(quote!(#m).to_string(), "crate :: kernels :: MODULE");
        let inst: Vec<String> = o
            .instances
            .iter()
            .map(|i| {
                let t = &i.types;
                format!("{}<{}>", i.name, quote!(#(#t),*))
            })
            .collect();
        assert_eq!(inst, ["k_f32<f32>", "k_pair<u8 , [u32 ; 4]>"]);
        let bytes: Vec<String> = o.bytes.iter().map(Ident::to_string).collect();
        assert_eq!(bytes, ["src", "dst"]);
    }

    #[test]
    fn launch_bounds_take_threads_and_optionally_blocks() {
        let bounds = |t: TokenStream| parse_options(t).map(|o| o.launch_bounds);
        assert_eq!(
            bounds(quote!(launch_bounds(256))).unwrap(),
            Some(LaunchBounds { max_threads: 256, min_blocks: None })
        );
        for (bad, says) in [
            (quote!(launch_bounds(0)), "0 threads per block"),
            (quote!(launch_bounds(2048, 1)), "2048 threads per block"),
            (quote!(launch_bounds(128, 0)), "0 blocks per multiprocessor"),
            (quote!(launch_bounds(128, 2, 3)), "write `launch_bounds(threads)`"),
            (quote!(launch_bounds()), "write `launch_bounds(threads)`"),
            (quote!(launch_bounds(128), launch_bounds(64)), "`launch_bounds` is given twice"),
        ] {
            let e = bounds(bad.clone()).err().unwrap_or_else(|| panic!("{bad} was accepted")).to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn relations_with_arithmetic_scalars_and_fields() {
        let o = parse_options(quote!(requires(
            len(out) * (world() - 1) != n + 2 * plan.slot.len,
            len(a) % 16 == 0,
            len(a) / 2 < len(b),
            len(b) > 0,
        )))
        .unwrap();
        let rels: Vec<String> = o.relations.iter().map(Relation::text).collect();
        assert_eq!(
            rels,
            [
                "len(out) * (world() - 1) != n + 2 * plan.slot.len",
                "len(a) % 16 == 0",
                "len(a) / 2 < len(b)",
                "len(b) > 0"
            ]
        );
        let leaves: Vec<String> = o.relations[0].leaves().iter().map(|t| t.text()).collect();
        assert_eq!(leaves, ["len(out)", "world()", "n", "plan.slot.len"]);
        // Precedence is Rust's: `*` binds tighter than `+`.
        let Term::Binary(_, ArithOp::Add, rhs) = &o.relations[0].rhs else { panic!("expected `n + ...`") };
        assert!(matches!(&**rhs, Term::Binary(_, ArithOp::Mul, _)));
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
        assert!(err(quote!(instances(a<u8>), instances(b<u8>))).contains("`instances` is given twice"));
        assert!(err(quote!(len(a) && len(b))).contains("expected a comparison"));
        assert!(err(quote!(requires(len(a)))).contains("expected a comparison"));
        assert!(err(quote!(len(a) == size(b))).contains("unknown function `size(...)` in a relation"));
        assert!(err(quote!(len(a, b) == len(c))).contains("takes the name of one kernel argument"));
        assert!(err(quote!(len(a) == world(b))).contains("`world()` takes no arguments"));
        assert!(err(quote!(len(a) == 1.5)).contains("not an integer"));
        assert!(err(quote!(len(a) == -len(b))).contains("not accepted in a relation"));
        assert!(err(quote!(len(a) == len(b) << 1)).contains("`<<` is not accepted in a relation"));
        assert!(err(quote!(len(a) == (len(b) < 1))).contains("only one comparison per relation"));
        assert!(err(quote!(requires())).contains("`requires()` lists no relation"));
        assert!(err(quote!(instances(k_f32))).contains("write the instance's type arguments after its name"));
        // A string, since rustfmt would rewrite `k<>` inside `quote!` as `k`.
        assert!(err("instances(k<>)".parse().unwrap()).contains("gives no type arguments"));
        assert!(err(quote!(module)).contains("expected `=`"));
        assert!(err(quote!("debug")).contains("expected one of"));
    }
}
