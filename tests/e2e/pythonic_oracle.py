#!/usr/bin/env python3
"""Reads pythonic tool calls with Python's own parser, for tests/e2e/serve_tools_test.cpp.

Usage: pythonic_oracle.py CASES_JSON OUT_JSON

CASES_JSON: a JSON array of texts. OUT_JSON: a JSON array, one entry per text: the calls it holds,
[{"name": str, "arguments": object}, ...], or null when it holds none.

A text holds calls when, stripped of the whitespace around it, it is bracketed by "[" and "]", and Python
parses it as one expression that is
a list of one call or more, each of a plain name with keyword arguments alone, each argument's value read
by ast.literal_eval (vLLM's pythonic parser reads them so) and a JSON value: no bytes, sets or complex
numbers, no infinite float, a dict's keys strings; no keyword twice (a SyntaxError when Python compiles
the call). Tuples become lists.
"""
import ast
import json
import math
import sys
import warnings


class NotJson(Exception):
    pass


def json_string(value):
    try:
        value.encode("utf-8")  # a lone surrogate ("\\ud800") is a str, but no UTF-8 and no JSON string
    except UnicodeEncodeError:
        raise NotJson()
    return value


def json_value(value):
    if isinstance(value, str):
        return json_string(value)
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotJson()
        return value
    if isinstance(value, (list, tuple)):
        return [json_value(item) for item in value]
    if isinstance(value, dict):
        if not all(isinstance(key, str) for key in value):
            raise NotJson()
        return {json_string(key): json_value(item) for key, item in value.items()}
    raise NotJson()


def calls(text):
    # Around the list, whitespace alone: no comment, no line continued (Python's own rules there are its
    # indentation's).
    text = text.strip(" \t\n\r")
    if not text.startswith("[") or not text.endswith("]"):
        return None
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError):
        return None
    if not isinstance(tree.body, ast.List) or not tree.body.elts:
        return None
    read = []
    for call in tree.body.elts:
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name) or call.args:
            return None
        arguments = {}
        for keyword in call.keywords:
            # **mapping; or a keyword given twice, which ast.parse lets through and Python's compiler refuses
            if keyword.arg is None or keyword.arg in arguments:
                return None
            try:
                arguments[keyword.arg] = json_value(ast.literal_eval(keyword.value))
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError, NotJson):
                return None
        read.append({"name": call.func.id, "arguments": arguments})
    return read


def main():
    warnings.simplefilter("ignore")  # an escape Python does not know warns, and keeps its backslash
    with open(sys.argv[1], encoding="utf-8") as f:
        texts = json.load(f)
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump([calls(text) for text in texts], f)


if __name__ == "__main__":
    main()
