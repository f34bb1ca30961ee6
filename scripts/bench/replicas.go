package main

// defaultTracePath is the Mooncake conversation trace beside the checkout.
const defaultTracePath = "../shared/traces/mooncake_conversation_trace.jsonl"
