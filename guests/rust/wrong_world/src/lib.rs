//! A component for a world that is not sluice's: the host must refuse it.
wit_bindgen::generate!({ path: "wit", world: "other" });

struct Other;

impl Guest for Other {
    fn run(input: String) -> String {
        input
    }
}

export!(Other);
