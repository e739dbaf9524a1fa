//! A valid component of a world that is not leasehold's: the host must report it as matching no
//! world and keep it away from the other plugins.

wit_bindgen::generate!({
    inline: "
        package example:other@1.0.0;
        world other {
            export greet: func(name: string) -> string;
        }
    ",
});

struct Other;

impl Guest for Other {
    fn greet(name: String) -> String {
        format!("hello, {name}")
    }
}

export!(Other);
