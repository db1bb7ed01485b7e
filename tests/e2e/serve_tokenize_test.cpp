// tilefire serve's POST /tokenize and /detokenize (samples/cli/serve_tokenize.cpp, vLLM's), and the chat
// rendering fields they share with /v1/chat/completions (render_chat_prompt: "add_generation_prompt",
// "continue_final_message", "chat_template_kwargs", "documents", "add_special_tokens"). The references:
// prompts written out by hand for the test model's template, Jinja2 (the oracle transformers renders with)
// for Qwen3's fetched template, the tokenizer.json's own vocabulary for token strings, and the chat's
// greedy reply against a completion of the same tokens.
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/common/cli_runner.h"
#include "tests/common/jinja_oracle.h"
#include "tests/common/serve_client.h"
#include "tests/common/tokenizer_files.h"

namespace tilefire::testing {
namespace {

using nlohmann::json;

// The text of `tokens`, by /detokenize.
std::string text_of(uint16_t port, const json& tokens) { return post_json(port, "/detokenize", {{"tokens", tokens}}).value("prompt", ""); }

// The message of a refused request, which must name `field`.
void expect_refused(uint16_t port, const std::string& path, const json& body, const std::string& field) {
  const HttpReply reply = post(port, path, body.dump());
  EXPECT_EQ(reply.status, 400) << body.dump() << "\n" << reply.body;
  if (reply.status != 400) return;
  const std::string message = json::parse(reply.body).at("error").at("message");
  EXPECT_NE(message.find("'" + field + "'"), std::string::npos) << message;
}

json user_says(const std::string& text) { return json::array({{{"role", "user"}, {"content", text}}}); }

TEST(ServeTokenize, APromptAndAChatAsTokensAndBack) {
  TextModelServer served("serve-tokenize", {});
  const uint16_t port = served.server.port();
  ASSERT_NE(port, 0);
  // A text: its tokens are the completion's (the reply to them is the same), and their text is the text.
  const json tokenized = post_json(port, "/tokenize", {{"prompt", "hello there"}});
  ASSERT_TRUE(tokenized.contains("tokens"));
  EXPECT_EQ(tokenized.at("count"), tokenized.at("tokens").size());
  EXPECT_GT(tokenized.at("count").get<int>(), 1);
  const HttpReply models = http_exchange(port, "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(tokenized.at("max_model_len"), json::parse(models.body).at("data")[0].at("max_model_len"));
  EXPECT_FALSE(tokenized.contains("token_strs"));
  // The tokenizer's post-processor adds its start token, unless asked not to.
  EXPECT_EQ(text_of(port, tokenized.at("tokens")), "<|start|>hello there");
  EXPECT_EQ(text_of(port, post_json(port, "/tokenize", {{"prompt", "hello there"}, {"add_special_tokens", false}}).at("tokens")), "hello there");
  const json by_text = post_json(port, "/v1/completions", {{"prompt", "hello there"}, {"max_tokens", 4}, {"temperature", 0}});
  const json by_ids = post_json(port, "/v1/completions", {{"prompt", tokenized.at("tokens")}, {"max_tokens", 4}, {"temperature", 0}});
  ASSERT_FALSE(by_text.empty());
  EXPECT_EQ(by_text.at("choices")[0].at("text"), by_ids.at("choices")[0].at("text"));
  EXPECT_EQ(by_text.at("usage").at("prompt_tokens"), tokenized.at("count"));

  // Token strings as the tokenizer.json spells them: its vocabulary's keys and its added tokens' contents
  // (the start token the tokenizer adds to a text).
  const json with_strings = post_json(port, "/tokenize", {{"prompt", "hello there"}, {"return_token_strs", true}});
  const json tokenizer_file = json::parse(read_file_text(served.model / "tokenizer.json"));
  std::map<int, std::string> spelling;
  for (const auto& [key, id] : tokenizer_file.at("model").at("vocab").items()) spelling[id.get<int>()] = key;
  for (const json& added : tokenizer_file.at("added_tokens")) spelling[added.at("id").get<int>()] = added.at("content");
  ASSERT_EQ(with_strings.value("token_strs", json::array()).size(), with_strings.at("tokens").size());
  EXPECT_EQ(with_strings.at("tokens"), tokenized.at("tokens"));
  for (size_t i = 0; i < with_strings.at("tokens").size(); ++i)
    EXPECT_EQ(with_strings.at("token_strs")[i], spelling[with_strings.at("tokens")[i].get<int>()]) << i;

  // A chat, rendered as the test model's template writes it, by hand.
  const json chat = post_json(port, "/tokenize", {{"messages", user_says("hi")}});
  EXPECT_EQ(text_of(port, chat.at("tokens")), "<|start|>user: hi<|end|>assistant:");
  const json chat_reply = post_json(port, "/v1/chat/completions", {{"messages", user_says("hi")}, {"max_tokens", 3}, {"temperature", 0}});
  ASSERT_FALSE(chat_reply.empty());
  EXPECT_EQ(chat_reply.at("usage").at("prompt_tokens"), chat.at("count"));
  const json no_header = post_json(port, "/tokenize", {{"messages", user_says("hi")}, {"add_generation_prompt", false}});
  EXPECT_EQ(text_of(port, no_header.at("tokens")), "<|start|>user: hi<|end|>");
  // A chat's template writes the start token; asked for, the tokenizer adds its own before it, as vLLM's does.
  const json special = post_json(port, "/tokenize", {{"messages", user_says("hi")}, {"add_special_tokens", true}});
  EXPECT_EQ(text_of(port, special.at("tokens")), "<|start|><|start|>user: hi<|end|>assistant:");
  const json special_reply = post_json(port, "/v1/chat/completions",
                                       {{"messages", user_says("hi")}, {"add_special_tokens", true}, {"max_tokens", 3}, {"temperature", 0}});
  ASSERT_FALSE(special_reply.empty());
  EXPECT_EQ(special_reply.at("usage").at("prompt_tokens"), special.at("count"));
}

// continue_final_message as transformers (4.57 on) does it: a tag after the last message's text, the
// prompt cut where the tag is; where the template trims the text (and the tag's space), whitespace before
// the cut goes too. The expected prompts are that rule worked by hand on each template.
TEST(ServeTokenize, AChatGoesOnWithItsLastMessage) {
  TempDir dir("serve-continue");
  const std::filesystem::path model = text_model(dir), trimming = dir.path() / "trimming.jinja";
  write_file_text(trimming, "{% for m in messages %}{{ m.role }}: {{ m.content | trim }}<|end|>{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}");
  Server server({"--model", model.string(), "--threads", "1"});
  Server trimmed({"--model", model.string(), "--threads", "1", "--chat-template", trimming.string()});
  const uint16_t port = server.port();
  ASSERT_NE(port, 0);
  ASSERT_NE(trimmed.port(), 0);
  auto continued_text = [&](uint16_t on, const json& last_content) {
    json messages = user_says("hi");
    messages.push_back({{"role", "assistant"}, {"content", last_content}});
    const json reply = post_json(on, "/tokenize", {{"messages", messages}, {"continue_final_message", true}});
    return reply.contains("tokens") ? text_of(on, reply.at("tokens")) : std::string("(refused)");
  };
  // The test model's template writes the text as it is: the prompt ends with it, its whitespace kept.
  EXPECT_EQ(continued_text(port, " The answer is \n"), "<|start|>user: hi<|end|>assistant:  The answer is \n");
  EXPECT_EQ(continued_text(port, "```python\n"), "<|start|>user: hi<|end|>assistant: ```python\n");
  EXPECT_EQ(continued_text(port, ""), "<|start|>user: hi<|end|>assistant: ");  // a prefill of nothing: the turn left open
  EXPECT_EQ(continued_text(port, "end"), "<|start|>user: hi<|end|>assistant: end");  // the text is also in <|end|>
  EXPECT_EQ(continued_text(port, "hi"), "<|start|>user: hi<|end|>assistant: hi");      // and in an earlier message
  // A list of text parts is its joined text, as the chat reads it.
  EXPECT_EQ(continued_text(port, json::array({{{"type", "text"}, {"text", "one"}}, {{"type", "text"}, {"text", "two "}}})),
            "<|start|>user: hi<|end|>assistant: one\ntwo ");
  // A template that trims: the text as it wrote it, trailing whitespace and all (Unicode's too) gone.
  EXPECT_EQ(continued_text(trimmed.port(), " The answer is \n"), "user: hi<|end|>assistant: The answer is");
  EXPECT_EQ(continued_text(trimmed.port(), "Hi\xE3\x80\x80"), "user: hi<|end|>assistant: Hi");
  EXPECT_EQ(continued_text(trimmed.port(), "  "), "user: hi<|end|>assistant:");

  // The chat's reply goes on from there: the same greedy reply as a completion of those tokens.
  json messages = user_says("hi");
  messages.push_back({{"role", "assistant"}, {"content", "The answer is"}});
  const json continued = post_json(port, "/tokenize", {{"messages", messages}, {"continue_final_message", true}});
  ASSERT_TRUE(continued.contains("tokens"));
  const json chat = post_json(port, "/v1/chat/completions",
                              {{"messages", messages}, {"continue_final_message", true}, {"add_generation_prompt", false}, {"max_tokens", 5}, {"temperature", 0}});
  const json completion = post_json(port, "/v1/completions", {{"prompt", continued.at("tokens")}, {"max_tokens", 5}, {"temperature", 0}});
  ASSERT_FALSE(chat.empty());
  ASSERT_FALSE(completion.empty());
  EXPECT_EQ(chat.at("usage").at("prompt_tokens"), continued.at("count"));
  EXPECT_EQ(chat.at("choices")[0].at("message").at("content"), completion.at("choices")[0].at("text"));
  // Refused: both at once, a last message without text, and a template that does not write it.
  expect_refused(port, "/tokenize", {{"messages", messages}, {"continue_final_message", true}, {"add_generation_prompt", true}}, "continue_final_message");
  expect_refused(port, "/v1/chat/completions", {{"messages", messages}, {"continue_final_message", true}, {"add_generation_prompt", true}}, "continue_final_message");
  json call = user_says("hi");
  call.push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {{{"id", "c1"}, {"type", "function"}, {"function", {{"name", "f"}, {"arguments", "{}"}}}}}}});
  expect_refused(port, "/tokenize", {{"messages", call}, {"continue_final_message", true}}, "continue_final_message");
  const std::filesystem::path forgetting = dir.path() / "forgetting.jinja";
  write_file_text(forgetting, "{% for m in messages %}{{ m.role }}<|end|>{% endfor %}");
  Server forgets({"--model", model.string(), "--threads", "1", "--chat-template", forgetting.string()});
  ASSERT_NE(forgets.port(), 0);
  expect_refused(forgets.port(), "/tokenize", {{"messages", messages}, {"continue_final_message", true}}, "continue_final_message");
}

// A template that shows the variables the request gives it.
constexpr const char* kVariablesTemplate =
    "{% for m in messages %}{{ m.role }}: {{ m.content }}|{% endfor %}"
    "{% if enable_thinking is defined and enable_thinking is false %}/no_think|{% endif %}"
    "{% if date_string is defined %}date {{ date_string }}|{% endif %}"
    "{% if reasoning_effort is defined %}effort {{ reasoning_effort }}|{% endif %}"
    "{% if documents %}{% for d in documents %}[{{ d.title }}: {{ d.text }}]{% endfor %}{% endif %}"
    "{% if tools %}{{ tools | length }} tools|{% endif %}"
    "{% if add_generation_prompt %}assistant:{% endif %}";

TEST(ServeTokenize, TheTemplateTakesTheRequestsVariables) {
  TempDir dir("serve-template-variables");
  const std::filesystem::path model = text_model(dir), template_path = dir.path() / "variables.jinja";
  write_file_text(template_path, kVariablesTemplate);
  Server server({"--model", model.string(), "--threads", "1", "--chat-template", template_path.string()});
  const uint16_t port = server.port();
  ASSERT_NE(port, 0);
  const json asked = {{"messages", user_says("hi")},
                      {"chat_template_kwargs", {{"enable_thinking", false}, {"date_string", "7 Dec 2026"}}},
                      {"documents", {{{"title", "A"}, {"text", "one"}}, {{"title", "B"}, {"text", "two"}}}},
                      {"reasoning_effort", "low"},
                      {"tools", {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", {{"type", "object"}}}}}}}}};
  const std::string expected = "user: hi|/no_think|date 7 Dec 2026|effort low|[A: one][B: two]1 tools|assistant:";
  const json tokenized = post_json(port, "/tokenize", asked);
  EXPECT_EQ(text_of(port, tokenized.at("tokens")), expected);
  // The chat renders the same prompt (tool_choice "none": this server reads no calls).
  json chat_body = asked;
  chat_body["tool_choice"] = "none";
  chat_body["max_tokens"] = 2;
  const json chat = post_json(port, "/v1/chat/completions", chat_body);
  ASSERT_FALSE(chat.empty());
  EXPECT_EQ(chat.at("usage").at("prompt_tokens"), tokenized.at("count"));
  EXPECT_EQ(text_of(port, post_json(port, "/tokenize", {{"messages", user_says("hi")}}).at("tokens")), "user: hi|assistant:");

  // What the request may not give: its own template, reserved or misshapen variables, misshapen documents.
  const json messages = user_says("hi");
  for (const std::string path : {"/tokenize", "/v1/chat/completions"}) {
    expect_refused(port, path, {{"messages", messages}, {"chat_template", "{{ messages }}"}}, "chat_template");
    expect_refused(port, path, {{"messages", messages}, {"chat_template_kwargs", "enable_thinking"}}, "chat_template_kwargs");
    expect_refused(port, path, {{"messages", messages}, {"chat_template_kwargs", {{"messages", json::array()}}}}, "chat_template_kwargs.messages");
    expect_refused(port, path, {{"messages", messages}, {"chat_template_kwargs", {{"add_generation_prompt", false}}}}, "chat_template_kwargs.add_generation_prompt");
    expect_refused(port, path, {{"messages", messages}, {"chat_template_kwargs", {{"tools", json::array()}}}}, "chat_template_kwargs.tools");
    expect_refused(port, path, {{"messages", messages}, {"documents", {{"title", "A"}}}}, "documents");
    expect_refused(port, path, {{"messages", messages}, {"add_generation_prompt", "yes"}}, "add_generation_prompt");
    expect_refused(port, path, {{"messages", messages}, {"add_special_tokens", 1}}, "add_special_tokens");
    expect_refused(port, path, {{"messages", messages}, {"reasoning_effort", 2}}, "reasoning_effort");
  }
}

// Qwen3's own template (fetched), rendered by Jinja2 as transformers renders it, with enable_thinking
// false: the empty thinking block Qwen3 reads as "do not think" ends the prompt.
TEST(ServeTokenize, Qwen3sTemplateWithThinkingTurnedOff) {
  REQUIRE_TOKENIZER_FILES();
  REQUIRE_JINJA_ORACLE();
  TempDir dir("serve-qwen3-kwargs");
  const std::filesystem::path model = text_model(dir), template_path = dir.path() / "qwen3.jinja";
  const json config = json::parse(read_file_text(model_tokenizer("qwen3").parent_path() / "tokenizer_config.json"));
  const std::string source = config.at("chat_template");
  write_file_text(template_path, source);
  Server server({"--model", model.string(), "--threads", "1", "--chat-template", template_path.string()});
  const uint16_t port = server.port();
  ASSERT_NE(port, 0);
  const json messages = json::array({{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "hi"}}});
  std::vector<OracleCase> cases;
  for (bool thinking : {false, true}) {
    nlohmann::ordered_json context = {{"messages", messages}, {"tools", nullptr}, {"documents", nullptr}, {"add_generation_prompt", true}};
    context["bos_token"] = "<|start|>";  // the test model's tokenizer_config.json's, which the server gives every template
    context["eos_token"] = "<|end|>";
    context["enable_thinking"] = thinking;
    cases.push_back({source, context});
  }
  const nlohmann::ordered_json oracle = run_jinja_oracle(cases);
  ASSERT_EQ(oracle.size(), 2u);
  const std::string off = oracle[0].at("output"), on = oracle[1].at("output");
  const std::string empty_thinking = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
  ASSERT_GE(off.size(), empty_thinking.size());
  EXPECT_EQ(off.substr(off.size() - empty_thinking.size()), empty_thinking);
  EXPECT_EQ(text_of(port, post_json(port, "/tokenize", {{"messages", messages}, {"chat_template_kwargs", {{"enable_thinking", false}}}}).at("tokens")), off);
  EXPECT_EQ(text_of(port, post_json(port, "/tokenize", {{"messages", messages}, {"chat_template_kwargs", {{"enable_thinking", true}}}}).at("tokens")), on);
  EXPECT_EQ(text_of(port, post_json(port, "/tokenize", {{"messages", messages}}).at("tokens")), on);  // Qwen3 thinks by default
}

TEST(ServeTokenize, AModelWithoutATokenizerReadsBytes) {
  Server server({"--threads", "1"});  // the built-in sample: text as bytes
  const uint16_t port = server.port();
  ASSERT_NE(port, 0);
  const json tokenized = post_json(port, "/tokenize", {{"prompt", "h\xC3\xA9"}, {"return_token_strs", true}});
  EXPECT_EQ(tokenized.at("tokens"), json({104, 0xC3, 0xA9}));
  EXPECT_EQ(tokenized.at("count"), 3);
  ASSERT_EQ(tokenized.value("token_strs", json::array()).size(), 3u);
  EXPECT_EQ(tokenized.at("token_strs")[0], "h");
  EXPECT_EQ(text_of(port, tokenized.at("tokens")), "h\xC3\xA9");
  expect_refused(port, "/tokenize", {{"prompt", "hi"}, {"add_special_tokens", "no"}}, "add_special_tokens");
  const HttpReply chat = post(port, "/tokenize", json({{"messages", user_says("hi")}}).dump());
  EXPECT_EQ(chat.status, 400);
  EXPECT_NE(chat.body.find("no tokenizer.json"), std::string::npos) << chat.body;
}

TEST(ServeTokenize, BadRequestsAreRefusedByName) {
  TextModelServer served("serve-tokenize-errors", {"--api-key", "sesame"});
  const uint16_t port = served.server.port();
  ASSERT_NE(port, 0);
  auto authorized = [&](const std::string& path, const json& body) {
    const std::string text = body.dump();
    return http_exchange(port, "POST " + path + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sesame\r\nContent-Length: " +
                                   std::to_string(text.size()) + "\r\n\r\n" + text);
  };
  // The key guards them as it guards /v1/.
  EXPECT_EQ(post(port, "/tokenize", json({{"prompt", "hi"}}).dump()).status, 401);
  EXPECT_EQ(post(port, "/detokenize", json({{"tokens", {104}}}).dump()).status, 401);
  EXPECT_EQ(authorized("/tokenize", {{"prompt", "hi"}}).status, 200);
  EXPECT_EQ(http_exchange(port, "GET /tokenize HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sesame\r\n\r\n").status, 405);
  auto refused = [&](const std::string& path, const json& body, const std::string& field) {
    const HttpReply reply = authorized(path, body);
    EXPECT_EQ(reply.status, 400) << body.dump() << "\n" << reply.body;
    if (reply.status == 400) {
      EXPECT_NE(reply.body.find("'" + field + "'"), std::string::npos) << reply.body;
    }
  };
  refused("/tokenize", json::object(), "messages");
  refused("/tokenize", {{"prompt", "hi"}, {"messages", user_says("hi")}}, "prompt");
  refused("/tokenize", {{"prompt", {1, 2}}}, "prompt");
  refused("/tokenize", {{"prompt", nullptr}, {"messages", nullptr}}, "messages");
  EXPECT_EQ(authorized("/tokenize", {{"prompt", "hi"}, {"messages", nullptr}}).status, 200);  // null: not given
  EXPECT_EQ(authorized("/tokenize", {{"prompt", nullptr}, {"messages", user_says("hi")}}).status, 200);
  refused("/tokenize", {{"messages", user_says("hi")}, {"chat_template_kwargs", {{"chat_template", "{{ 1 }}"}}}}, "chat_template_kwargs.chat_template");
  refused("/tokenize", {{"prompt", "hi"}, {"add_special_tokens", "no"}}, "add_special_tokens");
  refused("/tokenize", {{"prompt", "hi"}, {"return_token_strs", 1}}, "return_token_strs");
  refused("/tokenize", {{"messages", json::array()}}, "messages");
  refused("/tokenize", {{"messages", user_says("hi")}, {"tools", "f"}}, "tools");
  refused("/tokenize", {{"messages", user_says("hi")}, {"tools", {1}}}, "tools[0]");
  refused("/detokenize", json::object(), "tokens");
  refused("/detokenize", {{"tokens", "hi"}}, "tokens");
  refused("/detokenize", {{"tokens", {1, -1}}}, "tokens");
  refused("/detokenize", {{"tokens", {1, 512}}}, "tokens");  // the test model's vocabulary is 512
  refused("/detokenize", {{"tokens", {1.5}}}, "tokens");
  refused("/detokenize", {{"tokens", {json::parse("18446744073709551615")}}}, "tokens");
  // And the server goes on.
  EXPECT_EQ(authorized("/detokenize", {{"tokens", json::array()}}).status, 200);
}

}  // namespace
}  // namespace tilefire::testing
