// jinja_eval.cpp: renders a parsed template (see jinja.h): statements, expressions, scopes;
// also the Value / Object constructors and from_json. Scopes follow Jinja2: a for loop's body
// has its own scope (a `set` inside does not leak out, hence namespace()), if does not; a macro
// call runs in a scope over the one it was defined in. Errors carry the template name and line
// of the node being evaluated. Every node evaluated, statement executed and byte written is
// charged to the render's Budget (jinja_internal.h), and evaluation nests at most
// Limits::max_depth deep, so no template can run without end or exhaust the stack.
#include <algorithm>
#include <unordered_map>

#include "core/error.h"
#include "text/jinja_ast.h"
#include "text/jinja_internal.h"

namespace zt::jinja {

using K = Value::Kind;

Value Value::none() {
  Value v;
  v.kind = K::none;
  return v;
}
Value Value::boolean(bool x) {
  Value v;
  v.kind = K::boolean;
  v.b = x;
  return v;
}
Value Value::integer(int64_t x) {
  Value v;
  v.kind = K::integer;
  v.i = x;
  return v;
}
Value Value::number(double x) {
  Value v;
  v.kind = K::number;
  v.d = x;
  return v;
}
Value Value::string(std::string x) {
  Value v;
  v.kind = K::string;
  v.s = std::move(x);
  return v;
}
Value Value::array(Array x) {
  Value v;
  v.kind = K::array;
  v.a = std::make_shared<Array>(std::move(x));
  return v;
}
Value Value::object() {
  Value v;
  v.kind = K::object;
  v.o = std::make_shared<Object>();
  return v;
}
Value Value::function(Function fn) {
  Value v;
  v.kind = K::function;
  v.f = std::make_shared<Function>(std::move(fn));
  return v;
}

const Value* Object::find(const std::string& key) const {
  for (auto& kv : items)
    if (kv.first == key) return &kv.second;
  return nullptr;
}
void Object::set(const std::string& key, Value v) {
  for (auto& kv : items)
    if (kv.first == key) {
      kv.second = std::move(v);
      return;
    }
  items.emplace_back(key, std::move(v));
}
const Value* CallArgs::kwarg(const std::string& name) const {
  for (auto& kv : kw)
    if (kv.first == name) return &kv.second;
  return nullptr;
}

template <class J>
static Value from_json_impl(const J& j, int depth = 0) {
  // Deeper nesting than any chat record has would only exhaust the stack.
  if (depth > 256) throw Error("JSON nested deeper than 256 levels");
  switch (j.type()) {
    case J::value_t::null:
      return Value::none();
    case J::value_t::boolean:
      return Value::boolean(j.template get<bool>());
    case J::value_t::number_integer:
      return Value::integer(j.template get<int64_t>());
    case J::value_t::number_unsigned:
      return Value::integer(int64_t(j.template get<uint64_t>()));
    case J::value_t::number_float:
      return Value::number(j.template get<double>());
    case J::value_t::string:
      return Value::string(j.template get<std::string>());
    case J::value_t::array: {
      Array a;
      for (auto& e : j) a.push_back(from_json_impl(e, depth + 1));
      return Value::array(std::move(a));
    }
    case J::value_t::object: {
      Value o = Value::object();
      for (auto it = j.begin(); it != j.end(); ++it)
        o.o->items.emplace_back(it.key(), from_json_impl(it.value(), depth + 1));
      return o;
    }
    default:
      return Value();
  }
}
Value from_json(const nlohmann::ordered_json& j) { return from_json_impl(j); }
Value from_json(const nlohmann::json& j) { return from_json_impl(j); }

namespace {

using Frame = std::unordered_map<std::string, Value>;
using Scope = std::vector<std::shared_ptr<Frame>>;

enum class Flow { normal, break_, continue_ };

struct Failure {  // a render failure with its line, turned into zt::Error by render()
  int line;
  std::string what;
};

class Renderer {
 public:
  Renderer(std::string* out, std::vector<Template::Span>* spans) : out_(out), spans_(spans) {}

  Flow exec(const Node& n, Scope& scope) {
    try {
      Nesting nest(depth_);
      Budget::steps(1);
      return exec_inner(n, scope);
    } catch (RenderFailure& f) {
      throw Failure{n.line, f.what};
    }
  }

  Value eval(const Node& n, Scope& scope) {
    try {
      Nesting nest(depth_);
      Budget::steps(1);
      Value v = eval_inner(n, scope);
      if (v.kind == K::string) Budget::string(v.s.size());  // made or copied (a name's value is a copy)
      return v;
    } catch (RenderFailure& f) {
      throw Failure{n.line, f.what};
    }
  }

 private:
  // Counts the nesting of exec / eval (and so of macro calls, which go through them).
  struct Nesting {
    int& d;
    explicit Nesting(int& depth) : d(depth) {
      if (++d > Budget::limits().max_depth) {
        --d;
        render_fail(str_cat("evaluation nested deeper than ", Budget::limits().max_depth,
                            " levels (the limit; a macro that calls itself without end?)"));
      }
    }
    ~Nesting() { --d; }
    Nesting(const Nesting&) = delete;
    Nesting& operator=(const Nesting&) = delete;
  };

  // Appends to the output (or the block being captured) within the string limit.
  void emit(const std::string& text) {
    if (text.size() > Budget::limits().max_string_bytes - std::min(out_->size(), Budget::limits().max_string_bytes))
      render_fail(str_cat("the output is longer than ", Budget::limits().max_string_bytes,
                          " bytes, the limit per render"));
    Budget::steps(int64_t(text.size() / 16));
    *out_ += text;
  }

  static Value lookup(const Scope& scope, const std::string& name) {
    for (auto it = scope.rbegin(); it != scope.rend(); ++it) {
      auto f = (*it)->find(name);
      if (f != (*it)->end()) return f->second;
    }
    const Value* g = global_functions().find(name);
    return g ? *g : Value();
  }

  void assign(const std::string& target, Value v, Scope& scope) {
    const size_t dot = target.find('.');
    if (dot == std::string::npos) {
      (*scope.back())[target] = std::move(v);
      return;
    }
    Value ns = lookup(scope, target.substr(0, dot));
    if (ns.kind != K::object || !ns.o->is_namespace)
      render_fail(str_cat("cannot assign attribute on non-namespace object '", target.substr(0, dot), "'"));
    ns.o->set(target.substr(dot + 1), std::move(v));
  }

  void assign_targets(const std::vector<std::string>& targets, const Value& v, Scope& scope) {
    if (targets.size() == 1) {
      assign(targets[0], v, scope);
      return;
    }
    Array items = iterate(v);
    if (items.size() != targets.size())
      render_fail(str_cat("cannot unpack ", items.size(), " values into ", targets.size(), " names"));
    for (size_t k = 0; k < targets.size(); ++k) assign(targets[k], items[k], scope);
  }

  Flow exec_body(const Node& body, Scope& scope) {
    for (auto& k : body.kids) {
      const Flow f = exec(*k, scope);
      if (f != Flow::normal) return f;
    }
    return Flow::normal;
  }

  Flow exec_inner(const Node& n, Scope& scope) {
    switch (n.kind) {
      case NodeKind::body:
        return exec_body(n, scope);
      case NodeKind::text:
        emit(n.str);
        return Flow::normal;
      case NodeKind::output:
        emit(to_str(eval(*n.a, scope)));
        return Flow::normal;
      case NodeKind::if_:  // if / elif conditions in order (a flat list: a long elif chain nests nothing)
        for (size_t k = 0; k < n.args.size(); ++k)
          if (truthy(eval(*n.args[k], scope))) return exec_body(*n.kids[k], scope);
        return n.b ? exec_body(*n.b, scope) : Flow::normal;
      case NodeKind::for_:
        return exec_for(n, scope);
      case NodeKind::set:
        assign_targets(n.names, eval(*n.a, scope), scope);
        return Flow::normal;
      case NodeKind::set_block: {
        std::string captured;
        std::string* saved = out_;
        out_ = &captured;
        auto* saved_spans = spans_;
        spans_ = nullptr;
        exec_body(*n.kids[0], scope);
        out_ = saved;
        spans_ = saved_spans;
        assign(n.names[0], Value::string(captured), scope);
        return Flow::normal;
      }
      case NodeKind::macro:
        define_macro(n, scope);
        return Flow::normal;
      case NodeKind::break_:
        return Flow::break_;
      case NodeKind::continue_:
        return Flow::continue_;
      case NodeKind::generation: {
        const size_t begin = out_->size();
        const Flow f = exec_body(*n.kids[0], scope);
        if (spans_) spans_->push_back({begin, out_->size()});
        return f;
      }
      default:
        render_fail("internal: an expression where a statement belongs");
    }
  }

  Flow exec_for(const Node& n, Scope& scope) {
    Array items = iterate(eval(*n.a, scope));
    if (n.c) {  // `for x in xs if cond`: the filter sees the loop variables, loop.* counts what passes
      Array kept;
      for (const Value& it : items) {
        Scope s = scope;
        s.push_back(std::make_shared<Frame>());
        assign_targets(n.names, it, s);
        if (truthy(eval(*n.c, s))) kept.push_back(it);
      }
      items = std::move(kept);
    }
    if (items.empty()) return n.b ? exec_body(*n.b, scope) : Flow::normal;
    Scope inner = scope;
    inner.push_back(std::make_shared<Frame>());
    const int64_t len = int64_t(items.size());
    for (int64_t k = 0; k < len; ++k) {
      Budget::steps(4);  // the loop object
      Value loop = Value::object();
      Object& o = *loop.o;
      o.set("index", Value::integer(k + 1));
      o.set("index0", Value::integer(k));
      o.set("revindex", Value::integer(len - k));
      o.set("revindex0", Value::integer(len - k - 1));
      o.set("first", Value::boolean(k == 0));
      o.set("last", Value::boolean(k == len - 1));
      o.set("length", Value::integer(len));
      o.set("depth", Value::integer(1));
      o.set("depth0", Value::integer(0));
      o.set("previtem", k > 0 ? items[size_t(k - 1)] : Value());
      o.set("nextitem", k + 1 < len ? items[size_t(k + 1)] : Value());
      (*inner.back())["loop"] = loop;
      assign_targets(n.names, items[size_t(k)], inner);
      const Flow f = exec_body(*n.kids[0], inner);
      if (f == Flow::break_) break;
    }
    return Flow::normal;
  }

  void define_macro(const Node& n, Scope& scope) {
    const Node* def = &n;
    // Weak: the macro's value lives in these frames, and a strong capture would make a cycle.
    std::vector<std::weak_ptr<Frame>> closure(scope.begin(), scope.end());
    Renderer* self = this;
    Value fn = Value::function([def, closure, self](CallArgs& a) {
      if (self->macro_depth_ >= 200) render_fail(str_cat("macro '", def->str, "' calls nested deeper than 200"));
      struct Depth {
        int& d;
        ~Depth() { --d; }
      } guard{++self->macro_depth_};
      Scope s;
      for (const auto& w : closure) {
        s.push_back(w.lock());
        if (!s.back()) render_fail(str_cat("macro '", def->str, "' called after the scope it was defined in ended"));
      }
      s.push_back(std::make_shared<Frame>());
      Frame& f = *s.back();
      if (a.pos.size() > def->names.size())
        render_fail(str_cat("macro '", def->str, "' takes ", def->names.size(), " arguments, got ", a.pos.size()));
      for (size_t k = 0; k < def->names.size(); ++k) {
        const Value* kw = a.kwarg(def->names[k]);
        if (k < a.pos.size())
          f[def->names[k]] = a.pos[k];
        else if (kw)
          f[def->names[k]] = *kw;
        else if (def->args[k])
          f[def->names[k]] = self->eval(*def->args[k], s);
        else
          f[def->names[k]] = Value();
      }
      for (auto& kv : a.kw) {
        bool known = false;
        for (auto& nm : def->names) known |= nm == kv.first;
        if (!known) render_fail(str_cat("macro '", def->str, "' has no argument '", kv.first, "'"));
      }
      std::string captured;
      std::string* saved = self->out_;
      auto* saved_spans = self->spans_;
      self->out_ = &captured;
      self->spans_ = nullptr;
      self->exec_body(*def->kids[0], s);
      self->out_ = saved;
      self->spans_ = saved_spans;
      return Value::string(captured);
    });
    (*scope.back())[n.str] = fn;
  }

  CallArgs eval_args(const Node& n, Scope& scope) {
    CallArgs a;
    for (auto& x : n.args) a.pos.push_back(eval(*x, scope));
    for (size_t k = 0; k < n.names.size(); ++k) a.kw.emplace_back(n.names[k], eval(*n.kw_values[k], scope));
    return a;
  }

  Value eval_inner(const Node& n, Scope& scope) {
    switch (n.kind) {
      case NodeKind::literal:
        return n.value;
      case NodeKind::name:
        return lookup(scope, n.str);
      case NodeKind::list:
      case NodeKind::tuple: {
        Array items;
        for (auto& x : n.args) items.push_back(eval(*x, scope));
        return Value::array(std::move(items));
      }
      case NodeKind::dict: {
        Value o = Value::object();
        for (size_t k = 0; k < n.args.size(); ++k) {
          Value key = eval(*n.args[k], scope);
          if (key.kind != K::string) render_fail("ztrain's templates support string keys in dict literals only");
          o.o->set(key.s, eval(*n.kw_values[k], scope));
        }
        return o;
      }
      case NodeKind::attr: {
        Value obj = eval(*n.a, scope);
        if (!obj.defined())
          render_fail(str_cat(describe(*n.a), " is undefined (looking up its attribute '", n.str, "')"));
        return get_attr(obj, n.str);
      }
      case NodeKind::item: {
        Value obj = eval(*n.a, scope);
        if (!obj.defined()) render_fail(str_cat(describe(*n.a), " is undefined (looking up an item of it)"));
        return get_item(obj, eval(*n.b, scope));
      }
      case NodeKind::slice: {
        Value parts[3];
        for (int k = 0; k < 3; ++k)
          if (n.args[size_t(k)]) parts[k] = eval(*n.args[size_t(k)], scope);
        return slice(eval(*n.a, scope), parts[0], parts[1], parts[2]);
      }
      case NodeKind::call: {
        Value callee = eval(*n.a, scope);
        if (callee.kind != K::function)
          render_fail(str_cat(describe(*n.a), callee.defined() ? " is not callable" : " is undefined"));
        CallArgs a = eval_args(n, scope);
        return (*callee.f)(a);
      }
      case NodeKind::filter: {
        Value v = eval(*n.a, scope);
        CallArgs a = eval_args(n, scope);
        return apply_filter(n.str, v, a);
      }
      case NodeKind::test: {
        Value v = eval(*n.a, scope);
        std::vector<Value> args;
        for (auto& x : n.args) args.push_back(eval(*x, scope));
        return Value::boolean(apply_test(n.str, v, args) != n.negate);
      }
      case NodeKind::unary: {
        Value v = eval(*n.a, scope);
        if (n.str == "not") return Value::boolean(!truthy(v));
        if (v.kind == K::integer) return Value::integer(n.str == "-" ? int_neg(v.i) : v.i);
        if (v.kind == K::number) return Value::number(n.str == "-" ? -v.d : v.d);
        if (v.kind == K::boolean) return Value::integer(n.str == "-" ? -int64_t(v.b) : int64_t(v.b));
        render_fail(str_cat("bad operand type for unary ", n.str, ": '", type_name(v), "'"));
      }
      case NodeKind::binary: {
        Value l = eval(*n.a, scope);
        if (n.str == "and") return truthy(l) ? eval(*n.b, scope) : l;
        if (n.str == "or") return truthy(l) ? l : eval(*n.b, scope);
        return binary_op(n.str, l, eval(*n.b, scope));
      }
      case NodeKind::cond:
        if (truthy(eval(*n.c, scope))) return eval(*n.a, scope);
        return n.b ? eval(*n.b, scope) : Value();
      default:
        render_fail("internal: a statement where an expression belongs");
    }
  }

  // How an expression is named in a message: 'name', 'obj.attr.attr', or "a value". Built in one
  // pass over the chain and cut at 120 characters: a chain 10,000 attributes long that fails
  // must not make a message 10,000 attributes long (or take time exponential in it).
  static std::string describe(const Node& n) {
    std::vector<const std::string*> attrs;
    const Node* base = &n;
    for (; base->kind == NodeKind::attr; base = base->a.get()) attrs.push_back(&base->str);
    std::string path = base->kind == NodeKind::name ? base->str : "";
    for (auto it = attrs.rbegin(); it != attrs.rend() && path.size() <= 120; ++it) path += "." + **it;
    if (path.size() > 120) path = path.substr(0, 120) + "...";
    if (base->kind == NodeKind::name) return "'" + path + "'";
    return attrs.empty() ? "a value" : "the attribute '" + path.substr(1) + "' of a value";
  }

  std::string* out_;
  std::vector<Template::Span>* spans_;
  int macro_depth_ = 0;
  int depth_ = 0;  // exec / eval nesting (Nesting)
};

}  // namespace

Template::Template(const std::string& source, std::string name) : name_(std::move(name)) {
  root_ = parse_template(source, name_, &has_generation_);
}

Template::~Template() = default;

std::string Template::render(const Value& context, std::vector<Span>* spans, const Limits& limits) const {
  Budget budget(limits);
  std::string out;
  Scope scope{std::make_shared<Frame>()};
  if (context.kind == K::object)
    for (auto& kv : context.o->items) (*scope[0])[kv.first] = kv.second;
  Renderer r(&out, spans);
  NamespaceRegistry namespaces;  // cleared when the render ends: namespaces may refer to each other
  try {
    r.exec(*root_, scope);
  } catch (Failure& f) {
    // One line of readable size whatever the template raised or named (a message can quote values).
    std::string what = f.what.size() > 600 ? f.what.substr(0, 600) + "..." : f.what;
    for (char& c : what)
      if (c == '\n' || c == '\r') c = ' ';
    throw Error(str_cat("chat template ", name_, " line ", f.line, ": ", what));
  }
  return out;
}

}  // namespace zt::jinja
