#!/usr/bin/env python3
"""Renders chat templates as Hugging Face transformers' apply_chat_template does, for tests/graph/jinja_test.cpp.

Usage: chat_template_oracle.py CASES_JSON OUT_JSON

CASES_JSON: a JSON array of {"template": str, "context": object, "now": [year, month, day, hour, minute, second]}.
OUT_JSON: a JSON array, one entry per case: {"output": str} or {"error": "ExceptionClass: message"}.

The environment is transformers' own (src/transformers/utils/chat_template_utils.py, _compile_jinja_template):
Jinja2's immutable sandbox with trim_blocks and lstrip_blocks, the loop-controls extension, its tojson filter
(json.dumps without HTML escaping) and the globals raise_exception and strftime_now. Its AssistantTracker
extension, which records where {% generation %} blocks land in the output, is emulated by a tag that renders
the block's body and nothing else: the text is all these tests compare.
"""
import datetime
import json
import sys

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.sandbox


class GenerationTag(jinja2.ext.Extension):
    """{% generation %}...{% endgeneration %}: the body, as transformers renders it."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

    def _render_body(self, caller):
        return caller()


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def render(case):
    now = datetime.datetime(*case["now"])
    # A fresh environment per case, so that nothing one template does can reach another.
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda format: now.strftime(format)
    return env.from_string(case["template"]).render(**case["context"])


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: chat_template_oracle.py CASES_JSON OUT_JSON")
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)  # dicts keep the file's key order, as tojson and iteration need
    results = []
    for case in cases:
        try:
            results.append({"output": render(case)})
        except Exception as error:  # parse errors too: each case's failure is its result
            results.append({"error": f"{type(error).__name__}: {error}"})
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(results, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
