use super::*;
use convstore_store::event::ToolCallObject;

#[test]
fn revert_sets_all_three_policies_to_keep() {
    let c = Compaction {
        from_turn: 0,
        to_turn: 3,
        summary: None,
        reasoning: None,
        tool_calls: None,
        revert: Some(true),
        info: None,
    };
    let o = Overlay::from_compaction(0, Timestamp::EARLIEST, &c);
    assert_eq!(o.summary, Some(Summary::Keep));
    assert_eq!(o.reasoning, Some(ReasoningPolicy::Keep));
    assert_eq!(o.tool_calls, Some(ToolPolicy::Keep));
}

#[test]
fn per_tool_hints_replace_the_matching_flag() {
    let policy = ToolCallPolicy::Object(ToolCallObject {
        policy: ToolCallKind::Strip,
        request: Some(true),
        response: Some(false),
        tools: Some(vec![(
            "fs_read_file".to_owned(),
            ToolHint {
                request: Some(HintAction::Keep),
                response: Some(HintAction::Strip),
            },
        )]),
    });
    let action = ToolPolicy::of(&policy);
    assert!(!action.strips_request("fs_read_file"));
    assert!(action.strips_response("fs_read_file"));
    assert!(action.strips_request("fs_modify_file"));
    assert!(!action.strips_response("fs_modify_file"));
}

#[test]
fn string_forms_mean_what_rfd_064_says() {
    let both = ToolPolicy::of(&ToolCallPolicy::Strip);
    assert!(both.strips_request("x") && both.strips_response("x"));
    let req = ToolPolicy::of(&ToolCallPolicy::StripRequests);
    assert!(req.strips_request("x") && !req.strips_response("x"));
    let res = ToolPolicy::of(&ToolCallPolicy::StripResponses);
    assert!(!res.strips_request("x") && res.strips_response("x"));
    assert_eq!(ToolPolicy::of(&ToolCallPolicy::Omit), ToolPolicy::Omit);
}
