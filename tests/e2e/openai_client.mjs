// A real client for tilefire serve's test (tests/e2e/cli_serve_test.cpp): the official OpenAI SDK for
// JavaScript, as an application would use it. Prints one JSON object of what each call gave.
//   node openai_client.mjs SDK_ENTRY BASE_URL
// SDK_ENTRY: the package's index.mjs (from scripts/fetch-tokenizers); BASE_URL: http://127.0.0.1:PORT/v1
const [sdkEntry, baseURL] = process.argv.slice(2);
const { default: OpenAI } = await import(sdkEntry);
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 60000 });

const out = {};
out.models = (await client.models.list()).data.map((m) => m.id);
const model = out.models[0];  // the served one: a request naming another is answered 404
const completion = await client.completions.create({ model, prompt: [9, 100, 200], max_tokens: 10, temperature: 0 });
out.completion = { text: completion.choices[0].text, finish_reason: completion.choices[0].finish_reason, usage: completion.usage };
let streamed = '';
for await (const chunk of await client.completions.create({ model, prompt: [9, 100, 200], max_tokens: 10, temperature: 0, stream: true })) {
  streamed += chunk.choices[0]?.text ?? '';
}
out.completion_streamed = streamed;
const messages = [{ role: 'system', content: 'be brief' }, { role: 'user', content: 'hello' }];
const chat = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0 });
out.chat = { role: chat.choices[0].message.role, content: chat.choices[0].message.content, finish_reason: chat.choices[0].finish_reason };
let chatStreamed = '';
let streamedUsage = null;
for await (const chunk of await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0, stream: true,
                                                                 stream_options: { include_usage: true } })) {
  chatStreamed += chunk.choices[0]?.delta?.content ?? '';
  if (chunk.usage) streamedUsage = { usage: chunk.usage, choices: chunk.choices.length };
}
out.chat_streamed = chatStreamed;
out.chat_streamed_usage = streamedUsage;
// A named function's call, whole and through the SDK's stream helper, which joins the calls' deltas.
const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object',
  properties: { city: { type: 'string', maxLength: 6 } }, required: ['city'] } } }];
const toolChoice = { type: 'function', function: { name: 'get_weather' } };
const called = await client.chat.completions.create({ model, messages, tools, tool_choice: toolChoice, max_tokens: 40, temperature: 0 });
const call = called.choices[0].message.tool_calls?.[0];
out.tool_call = { id: call?.id, name: call?.function.name, arguments: call?.function.arguments, content: called.choices[0].message.content,
  finish_reason: called.choices[0].finish_reason };
const final = await client.chat.completions.stream({ model, messages, tools, tool_choice: toolChoice, max_tokens: 40, temperature: 0 })
  .finalChatCompletion();
const streamedCall = final.choices[0].message.tool_calls?.[0];
out.tool_call_streamed = { id: streamedCall?.id, name: streamedCall?.function.name, arguments: streamedCall?.function.arguments,
  finish_reason: final.choices[0].finish_reason };
// The Responses API: the same conversation as the chat above, and a named function's call as an item.
const response = await client.responses.create({ model, instructions: 'be brief', input: 'hello', max_output_tokens: 8, temperature: 0 });
out.response = { id: response.id, status: response.status, output_text: response.output_text, usage: response.usage,
  reason: response.incomplete_details?.reason ?? null };
// Streamed: the SDK's stream helper checks the events' order as it joins them into the final response.
let responseDeltas = '';
const responseStream = client.responses.stream({ model, instructions: 'be brief', input: 'hello', max_output_tokens: 8, temperature: 0 });
responseStream.on('response.output_text.delta', (event) => { responseDeltas += event.delta; });
const streamedResponse = await responseStream.finalResponse();
// The final response's text from its message items (the stream helper does not add output_text).
const streamedText = streamedResponse.output.filter((item) => item.type === 'message')
  .flatMap((item) => item.content.filter((part) => part.type === 'output_text').map((part) => part.text)).join('');
out.response_streamed = { text: streamedText, deltas: responseDeltas };
const responseCall = await client.responses.create({ model, input: messages, max_output_tokens: 40, temperature: 0,
  tools: [{ type: 'function', name: 'get_weather', parameters: tools[0].function.parameters, strict: false }],
  tool_choice: { type: 'function', name: 'get_weather' } });
const callItem = responseCall.output.find((item) => item.type === 'function_call');
out.response_call = { name: callItem?.name, call_id: callItem?.call_id, arguments: callItem?.arguments, status: responseCall.status };
const two = await client.completions.create({ model, prompt: [9, 100, 200], max_tokens: 10, temperature: 0, n: 2 });
out.two_choices = two.choices.map((c) => ({ index: c.index, text: c.text }));
try {
  await client.completions.create({ model, prompt: 'hi', n: 65 });
  out.refused = null;
} catch (error) {
  out.refused = { status: error.status, message: error.error?.message ?? error.message };
}
try {
  await client.chat.completions.create({ model: 'another-model', messages, max_tokens: 2 });
  out.other_model = null;
} catch (error) {
  out.other_model = { status: error.status, name: error.constructor.name, message: error.error?.message ?? error.message };
}
console.log(JSON.stringify(out));
